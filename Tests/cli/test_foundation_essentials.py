"""The client is built on FoundationEssentials, not full Foundation (binary size and start-up: docs/performance.md).

Full Foundation (and FoundationInternationalization, FoundationNetworking, FoundationXML) links CoreFoundation and
ICU's data, ~32 MiB of the binary; FoundationEssentials does not. One `import Foundation` in a module linked into
`tokenbridge` brings it all back (and, without MemberImportVisibility, its members leak into the module's other
files), so every source file of those modules is checked.
"""

import re

from conftest import ROOT

CLIENT_MODULES = ["Platform", "DBus", "UAFCore", "TokenDevices", "TokenBridge", "Prompts", "TokenBridgeService", "tokenbridge"]

# `import Foundation`, `@preconcurrency import Foundation`, `import struct Foundation.Date`,
# `import FoundationNetworking`, ... but not `import FoundationEssentials`.
FULL_FOUNDATION = re.compile(
    r"^\s*(?:@\w+\s+)*import\s+(?:(?:typealias|struct|class|enum|protocol|let|var|func)\s+)?"
    r"Foundation(?:Internationalization|Networking|XML)?(?![\w])",
    re.M,
)

def full_foundation_imports():
    found = {}
    for module in CLIENT_MODULES:
        for path in sorted((ROOT / "Sources" / module).rglob("*.swift")):
            rel = path.relative_to(ROOT).as_posix()
            lines = [m.group(0).strip() for m in FULL_FOUNDATION.finditer(path.read_text())]
            if lines:
                found[rel] = lines
    return found


def test_pattern_tells_full_foundation_from_essentials():
    for line in ["import Foundation", "@preconcurrency import Foundation", "import struct Foundation.Date",
                 "  import FoundationNetworking", "import FoundationInternationalization"]:
        assert FULL_FOUNDATION.search(line), line
    for line in ["import FoundationEssentials", "// import Foundation is gone", "import Dispatch"]:
        assert not FULL_FOUNDATION.search(line), line


def test_client_modules_do_not_import_full_foundation():
    offenders = full_foundation_imports()
    assert offenders == {}, (
        "modules linked into tokenbridge must import FoundationEssentials (plus Glibc, Dispatch), not full "
        f"Foundation (it links CoreFoundation and ICU's data): {offenders}")
