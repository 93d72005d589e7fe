/* Natural ("human") order for sample keys: "2" < "10", "a2" < "a10". */
#ifndef SF_INPUTS_NATSORT_H
#define SF_INPUTS_NATSORT_H

/* Compares digit runs by numeric value and everything else bytewise. Keys
 * that compare equal that way ("01" and "1") fall back to strcmp, so the
 * order is total and the same on every machine. */
int input_natcmp(const char *a, const char *b);

#endif
