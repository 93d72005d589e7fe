/* Exact decimal text of int64 and float64 values (number_text.h). */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "number_text.h"

size_t input_i64_to_text(char buf[INPUT_NUMBER_TEXT_MAX], int64_t v)
{
    return (size_t)snprintf(buf, INPUT_NUMBER_TEXT_MAX, "%" PRId64, v);
}

/* When the integer m times 10^scale reads back as a (> 0 or 0.0), its
 * significant digits (no trailing zeros) and the decimal exponent of the
 * first. */
static int digits_of(double a, uint64_t m, int scale, char *digits, size_t *n, int *exp10)
{
    char t[48];
    snprintf(t, sizeof t, "%" PRIu64 "e%d", m, scale);
    if (strtod(t, NULL) != a)
        return 0;
    int len = snprintf(digits, 21, "%" PRIu64, m);
    *exp10 = scale + len - 1;
    while (len > 1 && digits[len - 1] == '0')
        len--;
    *n = (size_t)len;
    return 1;
}

/* The shortest digits that read back as a (finite, >= 0), and of those the
 * nearest to a: for each length p, printf's correctly rounded p digits, or
 * when those miss (the interval that rounds to a is lopsided at a power of
 * two, or a tie went the wrong way) the neighbour on a's other side. What
 * Python's repr() finds. */
static void shortest_digits(double a, char *digits, size_t *n, int *exp10)
{
    for (int p = 1; p <= 17; p++) {
        char tmp[48];
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, a); /* d[.ddd]e[+-]xx */
        uint64_t m = 0;
        const char *s = tmp;
        for (; *s && *s != 'e'; s++)
            if (*s != '.')
                m = m * 10 + (uint64_t)(*s - '0');
        int scale = atoi(s + 1) - (p - 1);
        if (digits_of(a, m, scale, digits, n, exp10) || digits_of(a, m + 1, scale, digits, n, exp10) ||
            (m > 0 && digits_of(a, m - 1, scale, digits, n, exp10)))
            return;
    }
    assert(!"17 significant digits always read back");
}

size_t input_f64_to_text(char buf[INPUT_NUMBER_TEXT_MAX], double v)
{
    if (isnan(v))
        return (size_t)snprintf(buf, INPUT_NUMBER_TEXT_MAX, "nan");
    if (isinf(v))
        return (size_t)snprintf(buf, INPUT_NUMBER_TEXT_MAX, v < 0 ? "-inf" : "inf");
    char d[24];
    size_t n;
    int e;
    shortest_digits(fabs(v), d, &n, &e);
    size_t o = 0;
    if (signbit(v))
        buf[o++] = '-';
    if (e < -4 || e >= 16) { /* d.ddde+XX */
        buf[o++] = d[0];
        if (n > 1) {
            buf[o++] = '.';
            memcpy(buf + o, d + 1, n - 1);
            o += n - 1;
        }
        o += (size_t)snprintf(buf + o, INPUT_NUMBER_TEXT_MAX - o, "e%c%02d", e < 0 ? '-' : '+',
                              e < 0 ? -e : e);
        return o;
    }
    if (e < 0) { /* 0.000ddd */
        buf[o++] = '0';
        buf[o++] = '.';
        for (int z = 0; z < -e - 1; z++)
            buf[o++] = '0';
        memcpy(buf + o, d, n);
        o += n;
    } else { /* ddd.ddd, digits padded with zeros up to the point, ".0" when whole */
        size_t whole = (size_t)e + 1;
        for (size_t k = 0; k < whole; k++)
            buf[o++] = k < n ? d[k] : '0';
        buf[o++] = '.';
        if (n > whole) {
            memcpy(buf + o, d + whole, n - whole);
            o += n - whole;
        } else {
            buf[o++] = '0';
        }
    }
    buf[o] = '\0';
    return o;
}

int input_i64_from_text(const char *text, size_t len, int64_t *v)
{
    const char *d = text + (len > 0 && text[0] == '-');
    size_t dlen = len - (size_t)(d - text);
    if (dlen == 0 || dlen > 19 || (d[0] == '0' && (dlen > 1 || d != text)))
        return 0; /* empty, longer than any int64, a leading zero, or "-0" */
    for (size_t k = 0; k < dlen; k++)
        if (d[k] < '0' || d[k] > '9')
            return 0;
    char tmp[INPUT_NUMBER_TEXT_MAX];
    memcpy(tmp, text, len);
    tmp[len] = '\0';
    errno = 0;
    long long x = strtoll(tmp, NULL, 10);
    if (errno == ERANGE)
        return 0;
    *v = x;
    return 1;
}

int input_f64_from_text(const char *text, size_t len, double *v)
{
    if (len == 0 || len >= INPUT_NUMBER_TEXT_MAX)
        return 0;
    char tmp[INPUT_NUMBER_TEXT_MAX], back[INPUT_NUMBER_TEXT_MAX];
    memcpy(tmp, text, len);
    tmp[len] = '\0';
    char *end;
    double x = strtod(tmp, &end);
    if (end != tmp + len)
        return 0;
    /* The text is the value's only spelling: what export writes back. */
    size_t n = input_f64_to_text(back, x);
    if (n != len || memcmp(back, text, len) != 0)
        return 0;
    *v = x;
    return 1;
}
