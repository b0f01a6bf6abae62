#!/usr/bin/env python3
"""Checks that compiled classes use only scala-library members an older scala-library has.

Scala 2.13's library is backward but not forward binary compatible: a class compiled with
2.13.17 may call a library method added after 2.13.8 (Spark 3.5's Scala 2.13) and fail there with
NoSuchMethodError. This reads the constant pools of every class in JARS and reports each
reference to a `scala/...` class, method or field that LIBRARY (the older scala-library jar)
lacks, searching superclasses and interfaces. Exit 1 if any is missing.

    python3 .ci/check_scala_library_refs.py LIBRARY JAR [JAR ...]
"""

from __future__ import annotations

import struct
import sys
import zipfile


def parse(data: bytes):
    """(name, super, interfaces, members {(name, descriptor)}, references [(kind, class, name, desc)])."""
    pos = 10
    (count,) = struct.unpack_from(">H", data, 8)
    cp: list = [None] * count
    i = 1
    while i < count:
        tag = data[pos]
        pos += 1
        if tag == 1:
            (n,) = struct.unpack_from(">H", data, pos)
            cp[i] = data[pos + 2 : pos + 2 + n].decode("utf-8", "replace")
            pos += 2 + n
        elif tag in (3, 4):
            pos += 4
        elif tag in (5, 6):
            pos += 8
            i += 1
        elif tag in (7, 8, 16, 19, 20):
            cp[i] = (tag, struct.unpack_from(">H", data, pos)[0])
            pos += 2
        elif tag in (9, 10, 11, 12, 17, 18):
            cp[i] = (tag, *struct.unpack_from(">HH", data, pos))
            pos += 4
        elif tag == 15:
            pos += 3
        else:
            raise ValueError(f"constant pool tag {tag}")
        i += 1

    def cls(idx):
        return cp[cp[idx][1]] if idx else None

    _, this, sup, n_if = struct.unpack_from(">HHHH", data, pos)
    pos += 8
    interfaces = [cls(struct.unpack_from(">H", data, pos + 2 * k)[0]) for k in range(n_if)]
    pos += 2 * n_if
    members = set()
    for _ in range(2):  # fields, then methods
        (n,) = struct.unpack_from(">H", data, pos)
        pos += 2
        for _ in range(n):
            _, name, desc, n_attr = struct.unpack_from(">HHHH", data, pos)
            pos += 8
            members.add((cp[name], cp[desc]))
            for _ in range(n_attr):
                (length,) = struct.unpack_from(">I", data, pos + 2)
                pos += 6 + length
    refs = []
    for entry in cp:
        if isinstance(entry, tuple) and entry[0] == 7:
            refs.append(("class", cp[entry[1]], None, None))
        elif isinstance(entry, tuple) and entry[0] in (9, 10, 11):
            owner = cls(entry[1])
            nat = cp[entry[2]]
            refs.append(("member", owner, cp[nat[1]], cp[nat[2]]))
    return cls(this), cls(sup), interfaces, members, refs


def main(library: str, jars: list[str], skip_own: bool = True) -> int:
    """Prints what is missing; 1 if anything is. `skip_own`: references to a jar's own classes are
    not checked (False only to test this checker on a newer scala-library itself)."""
    lib = {}
    with zipfile.ZipFile(library) as z:
        for n in z.namelist():
            if n.endswith(".class"):
                name, sup, ifs, members, _ = parse(z.read(n))
                lib[name] = (sup, ifs, members)

    def has(owner: str, name: str, desc: str, seen=None) -> bool:
        if not owner.startswith("scala/"):
            return True  # a JDK class: not this check's business
        if owner not in lib:
            return False
        sup, ifs, members = lib[owner]
        if (name, desc) in members:
            return True
        seen = seen or set()
        return any(has(p, name, desc, seen) for p in [sup, *ifs] if p and p not in seen and not seen.add(p))

    missing, checked = set(), 0
    for jar in jars:
        with zipfile.ZipFile(jar) as z:
            own = {n[:-6] for n in z.namelist() if n.endswith(".class")}
            for n in sorted(own):
                data = z.read(n + ".class")
                if b"scala/" not in data:
                    continue  # e.g. the relocated AWS SDK: nothing to look up
                for kind, owner, name, desc in parse(data)[4]:
                    owner = owner.lstrip("[")
                    if owner.startswith("L"):
                        owner = owner[1:].rstrip(";")
                    if not owner.startswith("scala/") or (skip_own and owner in own):
                        continue
                    checked += 1
                    if kind == "class" and owner not in lib:
                        missing.add(f"{jar.rsplit('/', 1)[-1]}: class {owner} (used by {n})")
                    elif kind == "member" and not has(owner, name, desc):
                        missing.add(f"{jar.rsplit('/', 1)[-1]}: {owner}.{name}{desc} (used by {n})")
    for m in sorted(missing):
        print("missing in", library.rsplit("/", 1)[-1] + ":", m)
    print(f"{checked} references to scala-library checked in {len(jars)} jar(s); {len(missing)} missing")
    return 1 if missing else 0


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2:]))
