#!/usr/bin/env python3
"""Prints the fenced code block of README.md that follows a line `<!-- NAME -->`, so that the
tests build exactly what the README shows. Usage: extract.py README.md NAME"""
import sys

readme, name = sys.argv[1], sys.argv[2]
lines = open(readme, encoding='utf-8').read().split('\n')
marker = f'<!-- {name} -->'
start = lines.index(marker)
fence = next(i for i in range(start + 1, len(lines)) if lines[i].startswith('```'))
end = next(i for i in range(fence + 1, len(lines)) if lines[i].startswith('```'))
print('\n'.join(lines[fence + 1:end]))
