/* Numbers as decimal text that reads back to the same text: how list
 * inputs type their columns and how export writes list.csv (both in
 * lib/inputs/input_list.c), so a list packs, exports and packs again to
 * the same values and the same cells. */
#ifndef SF_INPUTS_NUMBER_TEXT_H
#define SF_INPUTS_NUMBER_TEXT_H

#include <stddef.h>
#include <stdint.h>

/* Longest text input_i64_to_text / input_f64_to_text write, NUL included. */
#define INPUT_NUMBER_TEXT_MAX 32

/* v in decimal: an optional '-', then "0" or digits without a leading zero
 * ("-12", "0", "9223372036854775807"). Returns the length. */
size_t input_i64_to_text(char buf[INPUT_NUMBER_TEXT_MAX], int64_t v);
/* v as the shortest decimal text that reads back to the same double, the
 * way Python's repr() writes it: "0.5", "1.0", "2500.0", "0.0001", "1e-05",
 * "1.5e+16", "-0.0", "nan", "inf", "-inf" (positional from 1e-4 up to 1e16,
 * then an exponent of at least two digits; ".0" on whole numbers). Every
 * NaN is "nan". Returns the length. */
size_t input_f64_to_text(char buf[INPUT_NUMBER_TEXT_MAX], double v);

/* 1 when text[0..len) is exactly what input_i64_to_text writes for some int64
 * (so no '+', blanks, leading zeros, "-0", or value out of range); sets *v. */
int input_i64_from_text(const char *text, size_t len, int64_t *v);
/* 1 when text[0..len) is exactly what input_f64_to_text writes for some double
 * (so "1e3", "0x1A", "+1.0", "1", ".5", "NaN", " 1.0" are not); sets *v. */
int input_f64_from_text(const char *text, size_t len, double *v);

#endif
