#!/usr/bin/env python3
"""Lists the file-level import circles inside each crate of the workspace.

A file imports another when it names an item of the other file's module by path: a `use`
tree, or a path in code that starts with `crate::`, `super::`, `self::` or a child module's
name. A `mod x;` declaration is not an import. Inline modules belong to their file. Test code
(`#[cfg(test)]` modules, inline or in their own file) is left out unless `--with-tests`: the
circles a test module closes are not part of the crate's structure.

Each circle is a strongly connected component of the file graph of one crate (the library or
binary rooted at src/lib.rs or src/main.rs), printed with the edges that close it. A component
is allowed when every circle in it goes through an import that ARCHITECTURE.md ("Import
circles") names as part of the design: ALLOWED below, each a set of files (relative to crates/).

Usage: scripts/import-circles.py [--check] [--with-tests] [--edges]
  --check   exit 1 if a circle is not covered by ALLOWED (scripts/test.sh runs this)
  --edges   print every file's imports too
"""
import os
import re
import sys

# Circles that ARCHITECTURE.md ("Import circles") names as part of the design. An edge that
# joins two files of one of these sets is named; a component found by the scan passes when
# its edges that are not named form no circle (every circle in it takes a named edge).
ALLOWED = [
    # The namespace holds each type's ids (and the fast paths' arena owners); each type's calls
    # are the namespace's methods, written in the type's files, and an arena owner keeps the
    # sleepers its adopter (`sem/fast/adopt.rs`, `msg/fast_sleep.rs`) took into the engine.
    {"uipc/src/ipc/namespace.rs", "uipc/src/ipc/msg/mod.rs", "uipc/src/ipc/shm/mod.rs",
     "uipc/src/ipc/sem/mod.rs", "uipc/src/ipc/sem/op.rs", "uipc/src/ipc/sem/undo.rs",
     "uipc/src/ipc/sem/lock.rs", "uipc/src/ipc/sem/fast/owner.rs",
     "uipc/src/ipc/sem/fast/adopt.rs", "uipc/src/ipc/msg/fast/owner.rs",
     "uipc/src/ipc/msg/fast_sleep.rs"},
    # semop, the wake-up scan, the lock modes, undo, parked calls and the fast path's arena
    # owner (which adopts sets and undo entries into the slow path and hands them back) are
    # one algorithm.
    {"uipc/src/ipc/sem/mod.rs", "uipc/src/ipc/sem/op.rs", "uipc/src/ipc/sem/lock.rs",
     "uipc/src/ipc/sem/undo.rs", "uipc/src/ipc/sem/parked.rs", "uipc/src/ipc/sem/fast/owner.rs",
     "uipc/src/ipc/sem/fast/adopt.rs"},
    # The preload's semaphore exports try the fast paths (the arena, the key table) first; a
    # fast-path sleeper's cancel is resolved by a call to the daemon through the exports.
    {"uipc-preload/src/sem.rs", "uipc-preload/src/semfast.rs", "uipc-preload/src/keyfast.rs"},
    # The thread-exit destructor the connection slots install also closes the fast path's
    # cached pidfd, which the fast path hooks when it caches one.
    {"uipc-preload/src/slots.rs", "uipc-preload/src/semfast.rs"},
    # One shared mapping: the key table sits after the semaphore arena, the arena maps both,
    # and a key lookup answers in the fast path's result type.
    {"uipc/src/ipc/keytable/mod.rs", "uipc/src/ipc/sem/fast/mod.rs"},
    # A call's start makes the parked call, whose poll runs the attempt again.
    {"uipc/src/ipc/msg/ops.rs", "uipc/src/ipc/msg/parked.rs"},
    {"uipc/src/locks/mod.rs", "uipc/src/locks/parked.rs"},
    # A CPU-clock timer's expiry is forwarded by the CPU-clock poller with the timer's rule.
    {"uipc/src/timers/timer.rs", "uipc/src/timers/cpu.rs"},
    # The frame reader receives through the socket layer; a frame carries the reader's charge.
    {"uipc-proto/src/reader.rs", "uipc-proto/src/transport.rs"},
    # Files split from one module for length.
    {"uipc/src/ipc/sem/fast/mod.rs", "uipc/src/ipc/sem/fast/sleep.rs"},
    {"uipc/src/ipc/msg/fast/mod.rs", "uipc/src/ipc/msg/fast/sleep.rs"},
    {"uipc/src/locks/lease/mod.rs", "uipc/src/locks/lease/ranges.rs"},
    {"uipc/src/ipc/registry.rs", "uipc/src/ipc/registry/vacancy.rs"},
    {"uipc-proto/src/request.rs", "uipc-proto/src/request/put.rs"},
    {"uipc-preload/src/locks/mod.rs", "uipc-preload/src/locks/close.rs"},
    {"uipc-bench/src/before/timer_tables.rs", "uipc-bench/src/before/timer_tables/seed_hash.rs"},
    {"uipc-bench/src/scenarios/lockperf.rs", "uipc-bench/src/scenarios/lockperf_more.rs",
     "uipc-bench/src/scenarios/shim/mod.rs"},
    {"uipc-conform/src/ipc/mod.rs", "uipc-conform/src/ipc/host.rs", "uipc-conform/src/ipc/msg.rs",
     "uipc-conform/src/ipc/sem.rs", "uipc-conform/src/ipc/sem_compare.rs",
     "uipc-conform/src/ipc/sem_fast.rs", "uipc-conform/src/ipc/sem_undo.rs",
     "uipc-conform/src/ipc/shm/mod.rs", "uipc-conform/src/ipc/shm/ctl.rs"},
    {"uipc-conform/src/locks.rs", "uipc-conform/src/locks/blocking.rs",
     "uipc-conform/src/locks/generator.rs", "uipc-conform/src/locks/scenario.rs"},
    {"uipc-conform/src/timers.rs", "uipc-conform/src/timers/deliver.rs",
     "uipc-conform/src/timers/generator.rs", "uipc-conform/src/timers/host.rs"},
]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRATES = os.path.join(ROOT, "crates")

TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<line>//[^\n]*)
  | (?P<block>/\*)
  | (?P<raw>b?r(?P<hashes>\#*)")
  | (?P<str>b?"(?:\\.|[^"\\])*")
  | (?P<char>b?'(?:\\(?:x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^'\\])')
  | (?P<life>'[A-Za-z_][A-Za-z0-9_]*)
  | (?P<ident>\$?[A-Za-z_][A-Za-z0-9_]*)
  | (?P<path>::)
  | (?P<punct>.)
    """,
    re.X | re.S,
)


def tokens(text):
    """Yields (kind, value) for identifiers, `::` and punctuation; drops comments, literals."""
    i = 0
    n = len(text)
    while i < n:
        m = TOKEN.match(text, i)
        kind = m.lastgroup
        if kind == "hashes":
            kind = "raw"
        if kind == "block":
            depth, j = 1, m.end()
            while depth and j < n:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            i = j
            continue
        if kind == "raw":
            end = '"' + m.group("hashes")
            j = text.find(end, m.end())
            i = len(text) if j < 0 else j + len(end)
            yield ("lit", "")
            continue
        i = m.end()
        if kind in ("ws", "line"):
            continue
        if kind in ("str", "char", "life"):
            yield ("lit", "")
        else:
            yield (kind, m.group())


def parse_use_tree(toks, i):
    """Parses a use tree at toks[i]; returns ([(path, bound name or None for a glob)], next i)."""
    prefix = []
    while i < len(toks):
        kind, val = toks[i]
        if kind == "ident":
            prefix.append(val)
            i += 1
            if i < len(toks) and toks[i][1] == "::":
                i += 1
                continue
            name = val
            if prefix[-1] == "self":
                prefix = prefix[:-1]
                name = prefix[-1] if prefix else None
            if i + 1 < len(toks) and toks[i][1] == "as":
                name = toks[i + 1][1]
                i += 2
            return [(prefix, None if name == "_" else name)], i
        if val == "::":
            i += 1
            continue
        if val == "*":
            return [(prefix, None)], i + 1
        if val == "{":
            paths = []
            i += 1
            while i < len(toks) and toks[i][1] != "}":
                if toks[i][1] == ",":
                    i += 1
                    continue
                sub, i = parse_use_tree(toks, i)
                paths += [(prefix + p, n) for p, n in sub]
            return paths, i + 1
        return [], i
    return [], i


def is_test_attr(attr):
    vals = [v for _, v in attr]
    return "cfg" in vals and "test" in vals and "not" not in vals


ITEM_KEYWORDS = {"fn", "struct", "enum", "trait", "type", "const", "static", "union"}


class Crate:
    def __init__(self, name, root_file):
        self.name = name
        self.modules = {}  # module path (tuple) -> file
        self.defs = {}  # module path -> names of the items defined in it
        self.imports = {}  # module path -> {bound name: path it imports}
        self.globs = {}  # module path -> paths it imports with `*`
        self.test_files = set()
        # file -> [(module path of the referring code, path, is test, re-export of this name)]
        self.refs = {}
        self.counts = {}  # file -> {identifier: occurrences}
        self.load(root_file, (), os.path.dirname(root_file), False)

    def load(self, path, modpath, child_dir, test):
        """Scans one file: its modules, items, `mod x;` declarations and path references."""
        with open(path, encoding="utf-8") as f:
            text = f.read()
        toks = list(tokens(text))
        counts = self.counts.setdefault(path, {})
        for kind, val in toks:
            if kind == "ident":
                counts[val] = counts.get(val, 0) + 1
        self.modules[modpath] = path
        if test:
            self.test_files.add(path)
        refs = self.refs.setdefault(path, [])
        # Stack of (module path, directory for `mod x;` children, brace depth of its body,
        # is test).
        stack = [(modpath, child_dir, 0, test)]
        depth = 0
        attrs = []
        public = False
        i = 0
        while i < len(toks):
            kind, val = toks[i]
            cur, cur_dir, body, cur_test = stack[-1]
            item_level = depth == body
            if val == "#" and i + 1 < len(toks) and toks[i + 1][1] in ("[", "!"):
                j = i + 1 if toks[i + 1][1] == "[" else i + 2
                level, k = 0, j
                while k < len(toks):
                    if toks[k][1] == "[":
                        level += 1
                    elif toks[k][1] == "]":
                        level -= 1
                        if level == 0:
                            break
                    k += 1
                attrs.append(toks[j + 1:k])
                i = k + 1
                continue
            if val == "{":
                depth += 1
            elif val == "}":
                depth -= 1
                if len(stack) > 1 and depth == stack[-1][2] - 1:
                    stack.pop()
            marked_test = cur_test or any(is_test_attr(a) for a in attrs)
            if item_level and kind == "ident" and val == "pub":
                public = True
            if kind == "ident" and val == "mod" and i + 2 < len(toks) and toks[i + 1][0] == "ident":
                name = toks[i + 1][1]
                if toks[i + 2][1] == "{":
                    depth += 1
                    self.modules[cur + (name,)] = path
                    stack.append((cur + (name,), os.path.join(cur_dir, name), depth, marked_test))
                    attrs, public = [], False
                    i += 3
                    continue
                if toks[i + 2][1] == ";":
                    if any(a and a[0][1] == "path" for a in attrs):
                        m = re.search(r'#\[path\s*=\s*"([^"]+)"\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+'
                                      + name + r"\s*;", text)
                        child = os.path.join(os.path.dirname(path), m.group(1))
                    else:
                        child = os.path.join(cur_dir, name + ".rs")
                        if not os.path.exists(child):
                            child = os.path.join(cur_dir, name, "mod.rs")
                    if os.path.exists(child):
                        sub_dir = (os.path.dirname(child) if child.endswith("mod.rs")
                                   else os.path.join(os.path.dirname(child), name))
                        self.load(child, cur + (name,), sub_dir, marked_test)
                    attrs, public = [], False
                    i += 3
                    continue
            if kind == "ident" and val == "use":
                paths, i = parse_use_tree(toks, i + 1)
                for p, name in paths:
                    if item_level and name is not None:
                        self.imports.setdefault(cur, {})[name] = tuple(p)
                    elif item_level:
                        self.globs.setdefault(cur, []).append(tuple(p))
                    reexport = item_level and public and name is not None
                    refs.append((cur, p, marked_test, name if reexport else None))
                attrs, public = [], False
                continue
            if item_level and kind == "ident" and i + 1 < len(toks) and toks[i + 1][0] == "ident":
                if val in ITEM_KEYWORDS or (val == "macro_rules" and False):
                    self.defs.setdefault(cur, set()).add(toks[i + 1][1])
            if val == "macro_rules" and i + 2 < len(toks) and toks[i + 2][0] == "ident":
                # An exported macro is an item of the crate root.
                exported = any(a and a[0][1] == "macro_export" for a in attrs)
                self.defs.setdefault(() if exported else cur, set()).add(toks[i + 2][1])
            if val in (";", "{", "}") or (kind == "ident" and val not in (
                    "pub", "crate", "in", "super", "self", "unsafe", "async", "extern")):
                attrs, public = [], False
            # A path in code: ident :: ident :: ... (not preceded by `::`).
            if kind == "ident" and i + 1 < len(toks) and toks[i + 1][1] == "::" and (
                    i == 0 or toks[i - 1][1] != "::"):
                p = [val]
                j = i + 1
                while j + 1 < len(toks) and toks[j][1] == "::" and toks[j + 1][0] == "ident":
                    p.append(toks[j + 1][1])
                    j += 2
                refs.append((cur, p, cur_test, None))
                i = j
                continue
            i += 1

    def resolve(self, cur, path, seen=()):
        """The file that defines what `path`, named from module `cur`, points to: through the
        modules it names, then through the imports (re-exports) of the last module."""
        if not path or (cur, path) in seen:
            return None
        seen = seen + ((cur, path),)
        head = path[0]
        if head in ("crate", "$crate"):
            base, rest = (), path[1:]
        elif head == "self":
            base, rest = cur, path[1:]
        elif head == "super":
            base, rest = cur, path
            while rest and rest[0] == "super":
                base, rest = base[:-1], rest[1:]
        elif cur + (head,) in self.modules:
            base, rest = cur, path
        elif head in self.imports.get(cur, {}) and len(path) > 1:
            # `use crate::a; a::f()`: through the module the name imports.
            return self.resolve(cur, self.imports[cur][head] + path[1:], seen)
        else:
            return None
        mod = base
        for k, seg in enumerate(rest):
            if mod + (seg,) in self.modules:
                mod = mod + (seg,)
                continue
            if seg in self.defs.get(mod, ()):
                break
            if seg in self.imports.get(mod, {}):
                target = self.resolve(mod, self.imports[mod][seg] + tuple(rest[k + 1:]), seen)
                if target:
                    return target
                if not self.imports[mod][seg][0] in ("crate", "super", "self"):
                    return None  # another crate's item, re-exported here
                break
            # Through a glob re-export (`pub use types::*`) to the module defining the name.
            for g in self.globs.get(mod, ()):
                target = self.resolve(mod, g + tuple(rest[k:]), seen)
                if target and target != self.modules.get(mod):
                    return target
            break
        return self.modules.get(mod)

    def graph(self, with_tests):
        edges = {}
        for f, refs in self.refs.items():
            if f in self.test_files and not with_tests:
                continue
            out = edges.setdefault(f, set())
            for cur, p, test, reexport in refs:
                if test and not with_tests:
                    continue
                # A re-export whose name the file uses nowhere else declares the module's
                # interface (like `mod x;`); it is not an import of the file's code.
                if reexport and self.counts[f].get(reexport, 0) <= 1:
                    continue
                t = self.resolve(cur, tuple(p))
                if t and t != f and (with_tests or t not in self.test_files):
                    out.add(t)
        return edges


def sccs(edges):
    """Tarjan's strongly connected components, iteratively."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    nodes = set(edges) | {t for ts in edges.values() for t in ts}
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def main():
    args = set(sys.argv[1:])
    with_tests = "--with-tests" in args
    bad = 0
    for name in sorted(os.listdir(CRATES)):
        src = os.path.join(CRATES, name, "src")
        for root_name in ("lib.rs", "main.rs"):
            root = os.path.join(src, root_name)
            if not os.path.exists(root):
                continue
            crate = Crate(name, root)
            edges = crate.graph(with_tests)
            rel = lambda f: os.path.relpath(f, CRATES)
            if "--edges" in args:
                for f in sorted(edges):
                    print(f"{rel(f)} -> {', '.join(sorted(rel(t) for t in edges[f])) or '-'}")
            for comp in sccs(edges):
                inside = set(comp)
                named = lambda f, t: any({rel(f), rel(t)} <= a for a in ALLOWED)
                # The named edges are the design's back edges: without them, no circle.
                rest = {f: {t for t in edges.get(f, ()) if t in inside and not named(f, t)}
                        for f in comp}
                allowed = not sccs(rest)
                bad += not allowed
                print(f"{'allowed' if allowed else 'CIRCLE'} in {name} ({root_name}): "
                      + " ".join(sorted(rel(f) for f in comp)))
                for f in comp:
                    targets = sorted((rel(t) + ("" if named(f, t) else " (not named)"))
                                     for t in edges.get(f, ()) if t in inside)
                    print(f"    {rel(f)} -> {', '.join(targets)}")
    if "--check" in args and bad:
        print(f"{bad} import circle(s) not named in ARCHITECTURE.md (scripts/import-circles.py)",
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
