#!/usr/bin/env python3
"""Derive sbt's repositories file (and JVM proxy flags) from Maven's own settings.

sbt must resolve only from `local` and Maven Central. If Maven here is configured with a
mirror of central (or an HTTP proxy), sbt uses the same, read at run time: nothing about a
registry host is written into the repository.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import xml.etree.ElementTree as ET


def _settings_files() -> list[pathlib.Path]:
    files = [pathlib.Path.home() / ".m2" / "settings.xml"]
    maven_home = os.environ.get("MAVEN_HOME") or os.environ.get("M2_HOME")
    for base in filter(None, [maven_home, "/usr/share/maven", "/etc/maven"]):
        for candidate in (pathlib.Path(base) / "conf" / "settings.xml", pathlib.Path(base) / "settings.xml"):
            files.append(candidate)
    seen, out = set(), []
    for f in files:
        try:
            key = f.resolve()
        except OSError:
            continue
        if f.is_file() and key not in seen:
            seen.add(key)
            out.append(f)
    return out


def _children(el: ET.Element, name: str) -> list[ET.Element]:
    return [c for c in el if c.tag.split("}")[-1] == name]


def _text(el: ET.Element, name: str) -> str:
    found = _children(el, name)
    return (found[0].text or "").strip() if found else ""


def _mirrors_central(mirror_of: str, url: str) -> bool:
    patterns = [p.strip() for p in mirror_of.split(",") if p.strip()]
    if "!central" in patterns:
        return False
    if url.startswith("http://0.0.0.0"):  # Maven's built-in blocker of plain-http repositories
        return False
    return any(p in ("*", "central", "external:*", "external:https:*") for p in patterns)


def central_mirror() -> str | None:
    for f in _settings_files():
        root = ET.parse(f).getroot()
        for mirrors in _children(root, "mirrors"):
            for m in _children(mirrors, "mirror"):
                url = _text(m, "url")
                if url and _mirrors_central(_text(m, "mirrorOf"), url):
                    return url
    return None


def java_proxy_flags() -> list[str]:
    for f in _settings_files():
        root = ET.parse(f).getroot()
        for proxies in _children(root, "proxies"):
            for p in _children(proxies, "proxy"):
                if _text(p, "active").lower() == "false":
                    continue
                host, port = _text(p, "host"), _text(p, "port") or "80"
                if not host:
                    continue
                proto = (_text(p, "protocol") or "http").lower()
                flags = [f"-D{proto}.proxyHost={host}", f"-D{proto}.proxyPort={port}"]
                if proto == "http":  # Maven's http proxy also carries https traffic
                    flags += [f"-Dhttps.proxyHost={host}", f"-Dhttps.proxyPort={port}"]
                non_proxy = _text(p, "nonProxyHosts")
                if non_proxy:
                    flags.append(f"-Dhttp.nonProxyHosts={non_proxy}")
                user = _text(p, "username")
                if user:
                    flags += [f"-D{proto}.proxyUser={user}", f"-D{proto}.proxyPassword={_text(p, 'password')}"]
                return flags
    return []


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repositories", required=True, help="where to write sbt's repositories file")
    ap.add_argument("--java-proxy-flags", action="store_true", help="print -D proxy flags, one per line")
    args = ap.parse_args()
    mirror = central_mirror()
    central = f"  maven-central: {mirror}\n" if mirror else "  maven-central\n"
    path = pathlib.Path(args.repositories)
    content = "[repositories]\n  local\n" + central
    if not path.exists() or path.read_text() != content:
        path.write_text(content)
    if args.java_proxy_flags:
        for flag in java_proxy_flags():
            print(flag)


if __name__ == "__main__":
    main()
