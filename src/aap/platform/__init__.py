"""The platform deployment's own surfaces (docs/platform.md): the provisioning API
(:mod:`aap.platform.api`, described by :mod:`aap.platform.openapi`) and the representation of
a tenant that it and ``aap tenants`` share (:mod:`aap.platform.views`), many tenants from one
file (:mod:`aap.platform.bulk`) and a tenant's inventory uploaded (:mod:`aap.platform.uploads`)."""
