/* Seed 003's scheduling simulation (section 5.1, Listing 1), one scheduling interval at a time.
 *
 * Transfers are sorted by arrival. At the start of interval k (time k*dt) every transfer that has
 * arrived by then starts; Listing 1 gives each running transfer its rate for the interval; a
 * transfer whose remaining bytes fit in the interval finishes at the exact instant they run out,
 * and the capacity it frees is handed out at the next interval's start (the scheduler runs once an
 * interval). Idle stretches are skipped.
 *
 * Built by the setup (make -C collectors/studies/planning/plansim OUT=...); sim.py has the same loop
 * in Python for a machine without the library, and the tests hold the two to each other.
 */
#include <math.h>
#include <stdlib.h>

/* Returns the number of intervals used (<= nsteps), or -1 when nsteps was too few, -2 on no memory.
 * rate: requested bytes/s; cap, cap_od: bytes/s (netCap, netCap_OD); admit, finish: seconds. */
long lh_plan_sim(long n, const double *arrival, const double *bytes, const double *rate,
                 const unsigned char *od, double dt, double cap, double cap_od,
                 long nsteps, double *admit, double *finish, double *delivered)
{
    long *active = malloc(sizeof(long) * (size_t)(n > 0 ? n : 1));
    double *rem = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    if (!active || !rem) {
        free(active); free(rem);
        return -2;
    }
    double cap_be = cap - cap_od;
    long nact = 0, next = 0, k = 0, used = 0;
    for (long i = 0; i < n; i++) rem[i] = bytes[i];
    while (next < n || nact > 0) {
        if (nact == 0) {
            long first = (long)ceil(arrival[next] / dt - 1e-9);
            if (first > k) k = first;
        }
        if (k >= nsteps) { used = -1; break; }
        double t = k * dt;
        while (next < n && arrival[next] <= t + 1e-9) {
            admit[next] = t;
            active[nact++] = next++;
        }
        /* Listing 1: requested loads, then BE's and OD's available bandwidth and fair shares */
        double req_od = 0, req_be = 0;
        for (long j = 0; j < nact; j++) {
            long i = active[j];
            if (od[i]) req_od += rate[i]; else req_be += rate[i];
        }
        double avail_be = req_od < cap_od ? cap - req_od : cap_be;
        double avail_od = req_be < cap_be ? cap - req_be : cap_od;
        double sent_k = 0;
        long kept = 0;
        for (long j = 0; j < nact; j++) {
            long i = active[j];
            double req = od[i] ? req_od : req_be, avail = od[i] ? avail_od : avail_be;
            double share = req > 0 ? rate[i] / req * avail : 0;
            double r = share < rate[i] ? share : rate[i];
            if (r < 0) r = 0;
            double can = r * dt;
            if (r > 0 && rem[i] <= can) {
                finish[i] = t + rem[i] / r;
                sent_k += rem[i];
                rem[i] = 0;
            } else {
                sent_k += can;
                rem[i] -= can;
                active[kept++] = i;
            }
        }
        nact = kept;
        delivered[k] += sent_k;
        k++;
        used = k;
    }
    free(active); free(rem);
    return used;
}
