#!/usr/bin/env python3
"""Build the HSA tests' AMDGPU code objects with clang and ld.lld.

One architecture: a plain code object (ELF). Several, with --bundler: a clang
offload bundle holding one code object per architecture ("hipv4-" entries),
as hipcc --genco makes.
"""
import argparse
import os
import subprocess
import sys


def build_one(args, arch, out):
    obj = out + '.o'
    subprocess.run([args.clang, '-target', 'amdgcn-amd-amdhsa', '-mcpu=' + arch, '-nogpulib',
                    '-O2', '-mcode-object-version=' + args.cov, '-x', 'cl', '-cl-std=CL2.0',
                    '-c', args.input, '-o', obj], check=True)
    subprocess.run([args.lld, '-shared', obj, '-o', out], check=True)
    os.remove(obj)


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--clang', required=True)
    p.add_argument('--lld', required=True)
    p.add_argument('--bundler')
    p.add_argument('--cov', default='5')
    p.add_argument('--archs', required=True)
    p.add_argument('--output', required=True)
    p.add_argument('input')
    args = p.parse_args()
    archs = args.archs.split(',')
    if len(archs) == 1:
        build_one(args, archs[0], args.output)
        return 0
    parts = []
    for arch in archs:
        part = '%s.%s.hsaco' % (args.output, arch)
        build_one(args, arch, part)
        parts.append(part)
    targets = ['host-x86_64-unknown-linux-gnu'] + ['hipv4-amdgcn-amd-amdhsa--' + a for a in archs]
    subprocess.run([args.bundler, '-type=o', '-targets=' + ','.join(targets),
                    '-input=/dev/null'] + ['-input=' + x for x in parts] +
                   ['-output=' + args.output], check=True)
    for part in parts:
        os.remove(part)
    return 0


if __name__ == '__main__':
    sys.exit(main())
