#!/usr/bin/env python3
"""Builds kvconnect's two wheels with the standard library only (no PyPI).

    python3 python/build_wheels.py --native bin/wheel --out dist

kvconnect-<v>-py3-none-linux_<arch>.whl holds the pure-Python package and,
in kvconnect/_native, libkvconnect.so, the kvconnect CLI and every
kvconnect-transport-* plugin found in --native; its console script
`kvconnect` runs that CLI. kvconnect_mooncake-<v>-py3-none-any.whl holds
mooncake/engine.py, which re-exports kvconnect's engine. Metadata comes from
each package's pyproject.toml.
"""

import argparse
import base64
import csv
import hashlib
import io
import os
import platform
import stat
import sys
import tomllib
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))


def dist_name(name: str) -> str:
    return name.replace("-", "_")


def metadata(project: dict, readme: str) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}", f"Version: {project['version']}",
             f"Summary: {project.get('description', '')}", f"Requires-Python: {project.get('requires-python', '')}",
             f"License: {project.get('license', {}).get('text', '')}"]
    lines += [f"Requires-Dist: {d}" for d in project.get("dependencies", [])]
    lines += ["Description-Content-Type: text/markdown", "", readme]
    return "\n".join(lines) + "\n"


class Wheel:
    def __init__(self, path: str, level: int = 6):
        self.zip = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED)
        self.level = level
        self.records = []

    def add(self, arcname: str, data: bytes, executable: bool = False) -> None:
        info = zipfile.ZipInfo(arcname, date_time=(2026, 1, 1, 0, 0, 0))
        mode = 0o755 if executable else 0o644
        info.external_attr = (stat.S_IFREG | mode) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data, compresslevel=self.level)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.records.append((arcname, f"sha256={digest}", str(len(data))))

    def add_file(self, arcname: str, path: str) -> None:
        with open(path, "rb") as f:
            data = f.read()
        self.add(arcname, data, executable=os.access(path, os.X_OK) and not path.endswith(".so"))

    def close(self, record_name: str) -> None:
        out = io.StringIO()
        w = csv.writer(out, lineterminator="\n")
        for r in self.records:
            w.writerow(r)
        w.writerow((record_name, "", ""))
        self.add(record_name, out.getvalue().encode())
        self.zip.close()


def build(pkg_dir: str, tag: str, out: str, extra, level: int = 6) -> str:
    with open(os.path.join(pkg_dir, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    with open(os.path.join(pkg_dir, project.get("readme", "README.md"))) as f:
        readme = f.read()
    name, version = dist_name(project["name"]), project["version"]
    path = os.path.join(out, f"{name}-{version}-{tag}.whl")
    w = Wheel(path, level)
    for top in sorted(os.listdir(pkg_dir)):
        src = os.path.join(pkg_dir, top)
        if not os.path.isdir(src) or top.startswith((".", "_")) or top == "build":
            continue
        for root, dirs, files in os.walk(src):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and d != "_native")
            for fn in sorted(files):
                if fn.endswith(".py"):
                    full = os.path.join(root, fn)
                    w.add_file(os.path.relpath(full, pkg_dir), full)
    extra(w)
    info = f"{name}-{version}.dist-info"
    w.add(f"{info}/METADATA", metadata(project, readme).encode())
    w.add(f"{info}/WHEEL", (f"Wheel-Version: 1.0\nGenerator: kvconnect build_wheels.py\n"
                            f"Root-Is-Purelib: {'true' if tag.endswith('any') else 'false'}\nTag: {tag}\n").encode())
    scripts = project.get("scripts", {})
    if scripts:
        ep = "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in scripts.items())
        w.add(f"{info}/entry_points.txt", ep.encode())
    top_level = sorted({r[0].split("/")[0] for r in w.records if not r[0].startswith(info)})
    w.add(f"{info}/top_level.txt", ("\n".join(top_level) + "\n").encode())
    w.close(f"{info}/RECORD")
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--native", required=True, help="directory with libkvconnect.so, kvconnect and kvconnect-transport-*")
    ap.add_argument("--out", default="dist")
    ap.add_argument("--compress-level", type=int, default=6, choices=range(0, 10), metavar="0-9",
                    help="deflate level of the wheels (default 6; the tests use 1: same files, built faster)")
    args = ap.parse_args()
    native = os.path.abspath(args.native)
    needed = ["libkvconnect.so", "kvconnect"]
    plugins = sorted(f for f in os.listdir(native) if f.startswith("kvconnect-transport-"))
    missing = [f for f in needed if not os.path.exists(os.path.join(native, f))]
    if missing or not plugins:
        print(f"build_wheels: {native} lacks {missing or 'kvconnect-transport-* plugins'}: run make python", file=sys.stderr)
        return 1
    os.makedirs(args.out, exist_ok=True)
    arch = platform.machine()
    tag = f"py3-none-linux_{arch}"

    def natives(w: Wheel) -> None:
        for f in needed + plugins:
            w.add_file(f"kvconnect/_native/{f}", os.path.join(native, f))

    a = build(os.path.join(HERE, "kvconnect"), tag, args.out, natives, args.compress_level)
    b = build(os.path.join(HERE, "mooncake"), "py3-none-any", args.out, lambda w: None, args.compress_level)
    for p in (a, b):
        print(f"{p} ({os.path.getsize(p) // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
