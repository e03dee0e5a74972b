/*
 * DTW distances and DTW k-nearest-neighbour search for longhaul's background recognition
 * (seed 000, section 5.4: k-NN with DTW, warping window 10).
 *
 * Distance definition (the same as tslearn's `dtw`, so accuracies are comparable): the point cost
 * is the squared difference, the path cost is the sum of point costs along the optimal warping
 * path inside a Sakoe-Chiba band |i - j| <= window, and the distance is the square root of that
 * sum. Every function here returns the *squared* distance (the sum); the caller takes the square
 * root. Keeping sums lets pruning compare against squared bounds without rounding detours.
 *
 * The recurrence is D[i][j] = cost(i, j) + min(D[i-1][j-1], D[i-1][j], D[i][j-1]) evaluated in
 * exactly this form, and the Makefile builds with -ffp-contract=off, so the numpy fallback in
 * dtw_knn.py produces bit-identical sums.
 *
 * k-NN pruning (results stay identical to brute force):
 *   - LB_Keogh of the candidate against the query's envelope, then of the query against the
 *     candidate's envelope; both are lower bounds of the banded DTW sum, so a candidate whose
 *     bound already reaches the current k-th best cannot enter the k best;
 *   - early abandoning inside DTW: every warping path crosses every row, and the costs are
 *     non-negative, so once a whole row's minimum reaches the k-th best the final sum will too.
 * Ties are kept in training order (a later candidate must be strictly better to displace an
 * earlier one), which is what a stable sort of brute-force distances gives.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A bound must clear the k-th best by this relative margin before it prunes, so a bound that
 * rounding pushed a few ulps above a DTW sum it equals in exact arithmetic never prunes. */
#define LB_SAFETY (1.0 - 1e-9)

/* Banded DTW sum of squared differences; returns INFINITY once every cell of a row is >= abandon.
 * rows: scratch of 2 * (n + 1) doubles. window < 0 means no band. */
static double dtw_sq(const double *a, const double *b, int n, int window, double abandon,
                     double *rows)
{
    double *prev = rows, *cur = rows + (n + 1);
    int r = (window < 0 || window > n) ? n : window;

    for (int j = 0; j <= n; j++)
        prev[j] = INFINITY;
    prev[0] = 0.0;
    for (int i = 1; i <= n; i++) {
        int lo = i - r > 1 ? i - r : 1;
        int hi = i + r < n ? i + r : n;
        double row_min = INFINITY;
        cur[lo - 1] = INFINITY; /* left of the band: unreachable */
        for (int j = lo; j <= hi; j++) {
            double d = a[i - 1] - b[j - 1];
            double cost = d * d;
            double best = prev[j - 1];
            if (prev[j] < best)
                best = prev[j];
            if (cur[j - 1] < best)
                best = cur[j - 1];
            cur[j] = cost + best;
            if (cur[j] < row_min)
                row_min = cur[j];
        }
        if (hi < n)
            cur[hi + 1] = INFINITY; /* right of the band: the next row reads it as "above" */
        if (row_min >= abandon)
            return INFINITY;
        double *t = prev;
        prev = cur;
        cur = t;
    }
    return prev[n];
}

/* Upper and lower envelope of x over the band: max/min of x[i-r .. i+r]. */
static void envelope(const double *x, int n, int window, double *upper, double *lower)
{
    int r = (window < 0 || window > n) ? n : window;
    for (int i = 0; i < n; i++) {
        int lo = i - r > 0 ? i - r : 0;
        int hi = i + r < n - 1 ? i + r : n - 1;
        double u = x[lo], l = x[lo];
        for (int j = lo + 1; j <= hi; j++) {
            if (x[j] > u)
                u = x[j];
            if (x[j] < l)
                l = x[j];
        }
        upper[i] = u;
        lower[i] = l;
    }
}

/* LB_Keogh: squared distance of x to the envelope (u, l), abandoned once it reaches limit. */
static double lb_keogh(const double *x, const double *u, const double *l, int n, double limit)
{
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        double d = 0.0;
        if (x[i] > u[i])
            d = x[i] - u[i];
        else if (x[i] < l[i])
            d = x[i] - l[i];
        sum += d * d;
        if (sum >= limit)
            return sum;
    }
    return sum;
}

/* Squared DTW distance of one pair of series of equal length n. */
double lh_dtw_sq(const double *a, const double *b, int n, int window)
{
    if (n <= 0)
        return n == 0 ? 0.0 : NAN;
    double *rows = malloc(sizeof(double) * 2 * (size_t)(n + 1));
    if (!rows)
        return NAN;
    double d = dtw_sq(a, b, n, window, INFINITY, rows);
    free(rows);
    return d;
}

/* Squared DTW distances of every row of a (na x n) to every row of b (nb x n) into out (na x nb).
 * Returns 0, or -1 when memory runs out. */
int lh_dtw_cdist_sq(const double *a, long na, const double *b, long nb, int n, int window,
                    double *out)
{
    double *rows = malloc(sizeof(double) * 2 * (size_t)(n + 1));
    if (!rows)
        return -1;
    for (long i = 0; i < na; i++)
        for (long j = 0; j < nb; j++)
            out[i * nb + j] = dtw_sq(a + i * n, b + j * n, n, window, INFINITY, rows);
    free(rows);
    return 0;
}

/* Insert (d, idx) into the sorted k-best lists if strictly better than the current k-th. */
static void keep_best(double d, long idx, int k, double *best_d, long *best_i)
{
    if (!(d < best_d[k - 1]))
        return;
    int p = k - 1;
    while (p > 0 && d < best_d[p - 1]) { /* strict: equal distances keep training order */
        best_d[p] = best_d[p - 1];
        best_i[p] = best_i[p - 1];
        p--;
    }
    best_d[p] = d;
    best_i[p] = idx;
}

/*
 * The k nearest training series (n_train x n) of each query (n_query x n) under banded DTW.
 * out_idx / out_d2 (n_query x k): neighbour indices and squared distances, nearest first;
 * missing neighbours (k > n_train) are -1 / INFINITY. prune = 0 computes every distance in full
 * (brute force, for tests and benchmarks). counters (may be NULL) receives three totals:
 * pruned by LB_Keogh, abandoned during DTW, and DTW computed to the end.
 * Returns 0, or -1 on bad arguments or when memory runs out.
 */
int lh_dtw_knn(const double *train, long n_train, const double *query, long n_query, int n,
               int window, int k, int prune, long *out_idx, double *out_d2, long *counters)
{
    if (n <= 0 || k <= 0 || n_train < 0 || n_query < 0)
        return -1;
    size_t len = (size_t)n;
    double *rows = malloc(sizeof(double) * 2 * (len + 1));
    double *qenv = malloc(sizeof(double) * 2 * len);
    double *tenv = prune ? malloc(sizeof(double) * 2 * len * (size_t)(n_train ? n_train : 1)) : NULL;
    if (!rows || !qenv || (prune && !tenv)) {
        free(rows);
        free(qenv);
        free(tenv);
        return -1;
    }
    if (prune)
        for (long t = 0; t < n_train; t++)
            envelope(train + t * n, n, window, tenv + 2 * len * t, tenv + 2 * len * t + len);
    long n_lb = 0, n_abandon = 0, n_full = 0;
    for (long q = 0; q < n_query; q++) {
        const double *x = query + q * n;
        double *best_d = out_d2 + q * k;
        long *best_i = out_idx + q * k;
        for (int p = 0; p < k; p++) {
            best_d[p] = INFINITY;
            best_i[p] = -1;
        }
        if (prune)
            envelope(x, n, window, qenv, qenv + len);
        for (long t = 0; t < n_train; t++) {
            const double *c = train + t * n;
            double bsf = best_d[k - 1];
            if (prune && isfinite(bsf)) {
                const double *tu = tenv + 2 * len * t;
                if (lb_keogh(c, qenv, qenv + len, n, bsf) * LB_SAFETY >= bsf ||
                    lb_keogh(x, tu, tu + len, n, bsf) * LB_SAFETY >= bsf) {
                    n_lb++;
                    continue;
                }
            }
            double d = dtw_sq(x, c, n, window, prune ? bsf : INFINITY, rows);
            if (isinf(d) && isfinite(bsf)) {
                n_abandon++;
                continue;
            }
            n_full++;
            keep_best(d, t, k, best_d, best_i);
        }
    }
    if (counters) {
        counters[0] = n_lb;
        counters[1] = n_abandon;
        counters[2] = n_full;
    }
    free(rows);
    free(qenv);
    free(tenv);
    return 0;
}
