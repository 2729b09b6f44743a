"""Prints a function whose attribute nests `depth` levels of brackets, after
a comment and a string that hold many more brackets than the limit (which
must not count)."""
import sys

depth = int(sys.argv[1])
print("// " + "[(<{" * 2000)
print('func.func @f() attributes {s = "' + "(" * 5000 + '", a = '
      + "[" * depth + "0" + "]" * depth + "} {")
print("  return")
print("}")
