"""aap: a dealer-side implementation of the Auto Agent Protocol (AAP) 3.1."""

import sys

# httpx imports its own command-line tool (and with it rich's progress bars and tables) on
# `import httpx` whenever click and rich are installed, as they are here: 3 MiB in every
# process that only needs the client (docs/benchmarks.md, "Memory"). Marked absent, httpx
# defines `httpx.main` as a message that its CLI is not installed; the `httpx` command itself
# runs in a process of its own, where this line never ran.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]

__version__ = "0.1.0"
AAP_VERSION = "3.1.0"
EXTENSION_URI = "https://autoagentprotocol.org/extensions/aap/v3.1"
SCHEMA_BASE_URL = "https://autoagentprotocol.org/v3.1/schemas/"
