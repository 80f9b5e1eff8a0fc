"""The kvconnect command (console script): runs the bundled Go CLI."""

import os
import sys

from . import _lib


def main() -> None:
    cli = os.path.join(_lib.native_dir(), "kvconnect")
    if not os.access(cli, os.X_OK):
        sys.exit(f"kvconnect: the bundled CLI {cli} is missing or not executable: reinstall the kvconnect wheel")
    env = dict(os.environ)
    # The CLI finds the bundled plugins beside itself; say so explicitly
    # unless the user chose a plugin directory.
    env.setdefault("KVCONNECT_PLUGIN_DIR", _lib.native_dir())
    os.execve(cli, [cli] + sys.argv[1:], env)


if __name__ == "__main__":
    main()
