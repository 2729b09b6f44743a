// RUN: coat-opt %s -coat-expand-shared-divisions -split-input-file -verify-diagnostics | FileCheck %s
// Idempotent: the divisions it leaves are not marked.
// RUN: coat-opt %s -coat-expand-shared-divisions -coat-expand-shared-divisions -split-input-file -verify-diagnostics | FileCheck %s

// A run of "exact" divisions by one divisor: the divisor's range test
// (2^-126 <= s <= 2^126, or +inf, or NaN), one IEEE reciprocal, then per
// value q = x*r and q' = fma(-fma(q, s', -x), r, q) with s' = 0 for s = inf;
// IEEE divisions, unmarked, in the other branch.
// CHECK-LABEL: func.func @exact(
// CHECK-SAME: %[[X0:.*]]: f32, %[[X1:.*]]: f32, %[[S:.*]]: f32)
// CHECK: %[[INF:.*]] = arith.constant 0x7F800000 : f32
// CHECK: %[[ISINF:.*]] = arith.cmpf oeq, %[[S]], %[[INF]] : f32
// CHECK: %[[LO:.*]] = arith.constant 1.17549435E-38 : f32
// CHECK: arith.cmpf ole, %[[LO]], %[[S]] : f32
// CHECK: %[[HI:.*]] = arith.constant 8.50705917E+37 : f32
// CHECK: arith.cmpf ole, %[[S]], %[[HI]] : f32
// CHECK: arith.cmpf uno, %[[S]], %[[S]] : f32
// CHECK: arith.ori
// CHECK-NEXT: %[[FAST:.*]] = arith.ori
// CHECK: %[[Q:.*]]:2 = scf.if %[[FAST]] -> (f32, f32) {
// CHECK: %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK: %[[R:.*]] = arith.divf %[[ONE]], %[[S]] : f32
// CHECK: %[[SF:.*]] = arith.select %[[ISINF]], %{{.*}}, %[[S]] : f32
// CHECK: %[[Q0:.*]] = arith.mulf %[[X0]], %[[R]] : f32
// CHECK: %[[NX0:.*]] = arith.negf %[[X0]] : f32
// CHECK: %[[N0:.*]] = math.fma %[[Q0]], %[[SF]], %[[NX0]] : f32
// CHECK: %[[NN0:.*]] = arith.negf %[[N0]] : f32
// CHECK: %[[C0:.*]] = math.fma %[[NN0]], %[[R]], %[[Q0]] : f32
// CHECK: %[[Q1:.*]] = arith.mulf %[[X1]], %[[R]] : f32
// CHECK: %[[C1:.*]] = math.fma %{{.*}}, %[[R]], %[[Q1]] : f32
// CHECK-NOT: math.absf
// CHECK: scf.yield %[[C0]], %[[C1]] : f32, f32
// CHECK: } else {
// CHECK: %[[D0:.*]] = arith.divf %[[X0]], %[[S]] : f32
// CHECK: %[[D1:.*]] = arith.divf %[[X1]], %[[S]] : f32
// CHECK: scf.yield %[[D0]], %[[D1]] : f32, f32
// CHECK: return %[[Q]]#0, %[[Q]]#1 : f32, f32
func.func @exact(%x0: f32, %x1: f32, %s: f32) -> (f32, f32) {
  %q0 = arith.divf %x0, %s {coat.shared_divisor = "exact"} : f32
  %q1 = arith.divf %x1, %s {coat.shared_divisor = "exact"} : f32
  return %q0, %q1 : f32, f32
}

// -----

// "fp8_codes": divisors from 2^-80, and an overflowing first product is
// kept (the correction would make it NaN; the FP8 conversion saturates it).
// CHECK-LABEL: func.func @codes(
// CHECK: arith.constant 8.27180613E-25 : f32
// CHECK: scf.if
// CHECK: %[[Q0:.*]] = arith.mulf
// CHECK: %[[C0:.*]] = math.fma %{{.*}}, %{{.*}}, %[[Q0]] : f32
// CHECK: %[[A0:.*]] = math.absf %[[Q0]] : f32
// CHECK: %[[OV0:.*]] = arith.cmpf oeq, %[[A0]], %{{.*}} : f32
// CHECK: arith.select %[[OV0]], %[[Q0]], %[[C0]] : f32
// CHECK: } else {
func.func @codes(%x0: f32, %x1: f32, %s: f32) -> (f32, f32) {
  %q0 = arith.divf %x0, %s {coat.shared_divisor = "fp8_codes"} : f32
  %q1 = arith.divf %x1, %s {coat.shared_divisor = "fp8_codes"} : f32
  return %q0, %q1 : f32, f32
}

// -----

// Runs end at another divisor, another contract, any other op, and a
// division whose dividend is a quotient of the run; unmarked divisions are
// left alone.
// CHECK-LABEL: func.func @runs(
// CHECK-SAME: %[[X:.*]]: f32, %[[S:.*]]: f32, %[[T:.*]]: f32)
// CHECK: scf.if {{.*}} -> (f32, f32)
// CHECK: } else {
// CHECK-NEXT: arith.divf %[[X]], %[[S]] : f32
// CHECK-NEXT: arith.divf %[[X]], %[[S]] : f32
// CHECK: scf.if {{.*}} -> (f32) {
// CHECK: } else {
// CHECK-NEXT: arith.divf %[[X]], %[[T]] : f32
// CHECK: arith.constant 8.27180613E-25
// CHECK: scf.if {{.*}} -> (f32) {
// CHECK: } else {
// CHECK-NEXT: arith.divf %[[X]], %[[T]] : f32
// CHECK: %[[P:.*]] = arith.addf
// CHECK: %[[QP:.*]] = scf.if {{.*}} -> (f32) {
// CHECK: } else {
// CHECK-NEXT: arith.divf %[[P]], %[[T]] : f32
// CHECK: scf.if {{.*}} -> (f32) {
// CHECK: } else {
// CHECK-NEXT: arith.divf %[[QP]], %[[T]] : f32
// CHECK: %[[PLAIN:.*]] = arith.divf %[[X]], %[[T]] : f32
// CHECK-NEXT: arith.divf %[[X]], %[[T]] fastmath<afn> : f32
// CHECK-NEXT: return
func.func @runs(%x: f32, %s: f32, %t: f32) -> (f32, f32, f32, f32, f32, f32, f32, f32) {
  %a = arith.divf %x, %s {coat.shared_divisor = "exact"} : f32
  %b = arith.divf %x, %s {coat.shared_divisor = "exact"} : f32
  %c = arith.divf %x, %t {coat.shared_divisor = "exact"} : f32
  %d = arith.divf %x, %t {coat.shared_divisor = "fp8_codes"} : f32
  %p = arith.addf %x, %x : f32
  %e = arith.divf %p, %t {coat.shared_divisor = "exact"} : f32
  %f = arith.divf %e, %t {coat.shared_divisor = "exact"} : f32
  %g = arith.divf %x, %t : f32
  %h = arith.divf %x, %t fastmath<afn> : f32
  return %a, %b, %c, %d, %e, %f, %g, %h : f32, f32, f32, f32, f32, f32, f32, f32
}

// -----

func.func @bad_value(%x: f32, %s: f32) -> f32 {
  // expected-error @below {{'arith.divf' op coat.shared_divisor must be "exact" or "fp8_codes", got "nearest"}}
  %q = arith.divf %x, %s {coat.shared_divisor = "nearest"} : f32
  return %q : f32
}

// -----

func.func @not_f32(%x: f64, %s: f64) -> f64 {
  // expected-error @below {{'arith.divf' op carries coat.shared_divisor, which only an f32 arith.divf may}}
  %q = arith.divf %x, %s {coat.shared_divisor = "exact"} : f64
  return %q : f64
}
