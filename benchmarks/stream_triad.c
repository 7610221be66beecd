/* STREAM-style triad a[i] = b[i] + s*c[i] with OpenMP, float32, for comparison with gapbench membw.
 * Usage: stream_triad N REPEATS   -> prints "median_gbs best_gbs" (3 arrays x N x 4 bytes per pass). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 1L << 25;
  int reps = argc > 2 ? atoi(argv[2]) : 20;
  float *a = aligned_alloc(64, n * sizeof(float));
  float *b = aligned_alloc(64, n * sizeof(float));
  float *c = aligned_alloc(64, n * sizeof(float));
  const float s = 0.4f;
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; i++) { a[i] = 0.1f; b[i] = 0.2f; c[i] = 0.1f; }
  double *t = malloc(reps * sizeof(double));
  for (int r = 0; r < reps; r++) {
    double t0 = omp_get_wtime();
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) a[i] = b[i] + s * c[i];
    t[r] = omp_get_wtime() - t0;
  }
  for (long i = 0; i < n; i += n / 7) if (a[i] != 0.2f + s * 0.1f) { fprintf(stderr, "wrong\n"); return 1; }
  qsort(t, reps, sizeof(double), cmp);
  double bytes = 3.0 * n * sizeof(float);
  printf("%.3f %.3f\n", bytes / t[reps / 2] / 1e9, bytes / t[0] / 1e9);
  return 0;
}
