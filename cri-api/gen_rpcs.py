#!/usr/bin/env python3
"""Writes the services and RPCs of a .proto file as a C++ table.

crihookd labels its call metrics with every CRI method. Reading them from the
generated descriptors at start-up built the whole runtime.v1 descriptor pool
(about 0.5 MiB of crihookd's idle memory) for a list of names known at build
time; test/metrics checks this table against the descriptors.

usage: gen_rpcs.py IN.proto OUT.h
"""
import re
import sys


def main():
    src, out = sys.argv[1], sys.argv[2]
    rows = []
    service = None
    with open(src, encoding='utf-8') as f:
        for line in f:
            code = line.split('//', 1)[0]
            m = re.match(r'^service\s+(\w+)\s*\{', code)
            if m:
                service = m.group(1)
                continue
            if service and re.match(r'^\}', code):
                service = None
                continue
            m = re.match(r'^\s*rpc\s+(\w+)\s*\(', code)
            if m and service:
                rows.append((service, m.group(1)))
    if not rows:
        sys.exit(f'{src}: no rpc found')
    with open(out, 'w', encoding='utf-8') as f:
        f.write('// Generated from %s by cri-api/gen_rpcs.py. Do not edit.\n' % src.split('/')[-1])
        f.write('#pragma once\n\n#include <string_view>\n\nnamespace crihook::criapi {\n\n')
        f.write('struct Rpc {\n  std::string_view service;  // "RuntimeService"\n'
                '  std::string_view method;   // "Version"\n};\n\n')
        f.write('inline constexpr Rpc kRuntimeRpcs[] = {\n')
        for s, m in rows:
            f.write('    {"%s", "%s"},\n' % (s, m))
        f.write('};\n\n}  // namespace crihook::criapi\n')


if __name__ == '__main__':
    main()
