"""aap: a dealer-side implementation of the Auto Agent Protocol (AAP) 3.1."""

__version__ = "0.1.0"
AAP_VERSION = "3.1.0"
EXTENSION_URI = "https://autoagentprotocol.org/extensions/aap/v3.1"
SCHEMA_BASE_URL = "https://autoagentprotocol.org/v3.1/schemas/"
