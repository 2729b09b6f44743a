// MLIR's parser recurses once per bracket level and overflows the stack a
// few thousand levels deep; coat-opt measures its input first and refuses
// more than 1024 levels with a located error, from a file or from stdin
// (the function's `{` is the first level, so its 1024th `[` is the first
// beyond).
// Brackets in comments and string literals do not count.

// RUN: %python %S/Inputs/nested_input.py 1025 > %t.deep.mlir
// RUN: not coat-opt %t.deep.mlir 2>&1 | FileCheck %s --check-prefix=DEEP
// RUN: not coat-opt < %t.deep.mlir 2>&1 | FileCheck %s --check-prefix=STDIN
// RUN: %python %S/Inputs/nested_input.py 1000 > %t.ok.mlir
// RUN: coat-opt %t.ok.mlir | FileCheck %s --check-prefix=OK

// DEEP: deep.mlir:2:6063: error: brackets nest deeper than 1024 levels here; coat-opt refuses such input because MLIR's parser recurses once per level and would overflow the stack
// STDIN: <stdin>:2:6063: error: brackets nest deeper than 1024 levels

// OK: func.func @f() attributes {a = {{\[+}}0{{\]+}}, s =
