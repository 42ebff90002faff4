"""Small concepts every layer shares, each with one home (foundation layer: no ``aap`` import).

==============  ====================================================================
``rfc3339``     timestamps: the seed's ``date-time`` grammar, parsing, the ``Z`` form
``pointer``     JSON Pointer (RFC 6901): escaping, building, reading
``memo``        bounded memoisation: one value made per key, one maker at a time per key
``backoff``     the doubling delay of a retry, capped
==============  ====================================================================

Importing the package imports none of them: the buyer client takes only what it uses.
"""
