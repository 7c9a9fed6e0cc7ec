#!/usr/bin/env python3
"""Checks crihook's layering over the include graph (docs/architecture.md, "Layers").

Every #include "..." of crihook's own code is rooted (a path from the
repository root, or cri-api/ for the generated contracts), and each part
includes only the parts below it:

  base, cri-api            (the foundation and the wire contracts)
  cri                      the CRI lifecycle vocabulary and the interception seam
  config, metrics, confine, topology
  proxy | nri | hooks      siblings (two fronts and the hooks): none includes another
  tools/                   the only place that includes both (with test/, bench/, fuzz/)

Exits 1 naming every include that breaks a rule; prints the layer graph on success.
"""
import os
import re
import subprocess
import sys

ALLOWED = {
    'base': {'base'},
    'cri': {'base', 'cri-api', 'cri'},
    'config': {'base', 'config'},
    'metrics': {'base', 'cri-api', 'metrics'},
    'confine': {'base', 'confine'},
    'topology': {'base', 'topology'},
    'proxy': {'base', 'cri-api', 'cri', 'config', 'metrics', 'proxy'},
    'nri': {'base', 'cri-api', 'cri', 'config', 'metrics', 'nri'},
    'hooks': {'base', 'cri-api', 'cri', 'config', 'metrics', 'confine', 'topology', 'hooks'},
}
# Anything of crihook's may be included from these.
TOP = {'tools', 'test', 'bench', 'fuzz'}
# External headers spelled with a directory, and the module ABI header that
# module sources include as their authors do (installed as crihook/crihook_module.h).
EXTERNAL = ('absl/', 'google/', 'grpcpp/', 'grpc/')
MODULE_HEADER = 'crihook_module.h'
GENERATED = re.compile(r'^cri-api/[a-z0-9_]+((\.grpc)?\.pb|\.rpcs)\.h$')
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = subprocess.check_output(['git', '-C', root, 'ls-files', '--cached', '--others',
                                     '--exclude-standard', '*.h', '*.cc'], text=True).split()
    errors = []
    edges = set()
    for f in files:
        part = f.split('/', 1)[0]
        if part not in ALLOWED and part not in TOP:
            errors.append(f'{f}: in no layer (add its folder to scripts/check-layers.py)')
            continue
        with open(os.path.join(root, f), encoding='utf-8') as fh:
            text = fh.read()
        for n, inc in ((text.count('\n', 0, m.start()) + 1, m.group(1))
                       for m in INCLUDE.finditer(text)):
            if inc.startswith(EXTERNAL) or inc == MODULE_HEADER:
                continue
            if not (GENERATED.match(inc) or os.path.isfile(os.path.join(root, inc))):
                errors.append(f'{f}:{n}: #include "{inc}" is not a path from the repository root')
                continue
            target = inc.split('/', 1)[0]
            if part in TOP:
                continue
            edges.add((part, target))
            if target not in ALLOWED[part]:
                errors.append(f'{f}:{n}: {part}/ must not include {inc} '
                              f'({part}/ may include {", ".join(sorted(ALLOWED[part]))})')
    if errors:
        print('\n'.join(errors))
        print(f'check-layers: {len(errors)} include(s) break the layering', file=sys.stderr)
        return 1
    for part in ALLOWED:
        below = sorted(t for p, t in edges if p == part and t != part)
        print(f'check-layers: {part} -> {", ".join(below) or "(nothing)"}')
    print('check-layers: ok')
    return 0


if __name__ == '__main__':
    sys.exit(main())
