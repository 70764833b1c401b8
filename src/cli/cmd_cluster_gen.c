/* `meshinfer cluster-gen`: a cluster file of N heterogeneous devices drawn
 * from stated distributions (plan.h mi_cluster_generate), for `simulate`,
 * `plan` and the planners. */
#define _POSIX_C_SOURCE 200809L
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "meshinfer/common.h"
#include "meshinfer/output.h"
#include "meshinfer/plan.h"

static void help(void)
{
    printf("usage: meshinfer cluster-gen --out FILE [options]\n\n"
           "Writes a cluster file (as `plan --cluster` and `simulate --cluster` read it) of N devices drawn\n"
           "from these distributions, seeded (the same options give the same file):\n"
           "  --devices N           how many (default 25, at most 256)\n"
           "  --seed S              the draws' seed (default 1)\n"
           "  --speed LO:HI         relative compute speed, uniform (default 0.5:2)\n"
           "  --mem-mb LO:HI        memory budget in MB, uniform (default 1000:4000)\n"
           "  --controller-mem-mb MB   device 0's budget instead (the controller holds the embeddings and\n"
           "                        classifier)\n"
           "  --latency-ms LO:HI    one-way latency of each pair, uniform, the same both ways (default\n"
           "                        0.05:0.5)\n"
           "  --bandwidth-mbit LO:HI  each pair's bandwidth, log-uniform, both ways (default 1000:10000:\n"
           "                        HeadSplit's simulated 1-10 Gbps links)\n"
           "  --mem-bandwidth-gbs G weight streaming of a speed-1.0 device (default 4: a Raspberry Pi 4)\n"
           "  --jitter-ms J, --loss-pct P   the link block's jitter and loss, for simulate (default 0)\n"
           "  --shared-medium       one medium for every transfer at LO of --bandwidth-mbit (WiFi); no\n"
           "                        per-pair bandwidths then\n"
           "A single value V for a range means V:V. Example (WiFi-like: 8-12 ms round trips, 20-100 Mbit/s):\n"
           "  meshinfer cluster-gen --devices 25 --latency-ms 4:6 --bandwidth-mbit 20:100 --out wifi25.json\n");
}

static void parse_range(const char *opt, const char *s, double *r)
{
    char buf[128];
    if (strlen(s) >= sizeof buf)
        mi_fatal("cluster-gen: %s '%s' is too long", opt, s);
    strcpy(buf, s);
    char *colon = strchr(buf, ':');
    if (colon)
        *colon = 0;
    r[0] = mi_parse_double(opt, buf, 0, 1e9);
    r[1] = colon ? mi_parse_double(opt, colon + 1, 0, 1e9) : r[0];
}

int cmd_cluster_gen(int argc, char **argv)
{
    static const struct option opts[] = {
        {"out", required_argument, 0, 'o'},          {"devices", required_argument, 0, 'n'},
        {"seed", required_argument, 0, 's'},         {"speed", required_argument, 0, 'S'},
        {"mem-mb", required_argument, 0, 'M'},       {"latency-ms", required_argument, 0, 'L'},
        {"bandwidth-mbit", required_argument, 0, 'B'}, {"mem-bandwidth-gbs", required_argument, 0, 'G'},
        {"jitter-ms", required_argument, 0, 'J'},    {"loss-pct", required_argument, 0, 'P'},
        {"shared-medium", no_argument, 0, 'm'},      {"help", no_argument, 0, 'h'},
        {"controller-mem-mb", required_argument, 0, 'C'},
        {0, 0, 0, 0}};
    mi_cluster_gen g;
    mi_cluster_gen_defaults(&g);
    const char *out = NULL;
    int k;
    while ((k = getopt_long(argc, argv, ":o:n:s:h", opts, NULL)) != -1) {
        switch (k) {
        case 'o': out = optarg; break;
        case 'n': g.n_devices = (int)mi_parse_long("--devices", optarg, 1, MI_MAX_RANKS); break;
        case 's': g.seed = mi_parse_u64("--seed", optarg); break;
        case 'S': parse_range("--speed", optarg, g.speed); break;
        case 'M': parse_range("--mem-mb", optarg, g.mem_mb); break;
        case 'L': parse_range("--latency-ms", optarg, g.latency_ms); break;
        case 'B': parse_range("--bandwidth-mbit", optarg, g.bandwidth_mbit); break;
        case 'G': g.mem_bandwidth_gbs = mi_parse_double("--mem-bandwidth-gbs", optarg, 1e-6, 1e9); break;
        case 'J': g.jitter_ms = mi_parse_double("--jitter-ms", optarg, 0, 10000); break;
        case 'P': g.loss_pct = mi_parse_double("--loss-pct", optarg, 0, 99.999); break;
        case 'm': g.shared_medium = 1; break;
        case 'C': g.controller_mem_mb = mi_parse_double("--controller-mem-mb", optarg, 1e-6, 1e9); break;
        case 'h': help(); return 0;
        default: cli_bad_option("cluster-gen", k, argv);
        }
    }
    cli_no_positional("cluster-gen", optind, argc, argv);
    if (!out)
        mi_fatal("cluster-gen: give --out FILE (see meshinfer cluster-gen --help)");
    char err[MI_ERRLEN], desc[1024];
    if (mi_output_check(out, "cluster file", NULL, 0, err))
        mi_fatal("%s", err);
    mi_cluster cl;
    if (mi_cluster_generate(&g, &cl, err))
        mi_fatal("%s", err);
    snprintf(desc, sizeof desc,
             "meshinfer cluster-gen: %d devices, seed %llu; speed uniform %g:%g, mem_mb uniform %g:%g, one-way "
             "latency_ms uniform %g:%g per pair, bandwidth_mbit log-uniform %g:%g %s, mem_bandwidth_gbs %g, "
             "jitter_ms %g, loss_pct %g%s", g.n_devices, (unsigned long long)g.seed, g.speed[0], g.speed[1],
             g.mem_mb[0], g.mem_mb[1], g.latency_ms[0], g.latency_ms[1], g.bandwidth_mbit[0], g.bandwidth_mbit[1],
             g.shared_medium ? "(shared medium: the low end for all)" : "per pair", g.mem_bandwidth_gbs, g.jitter_ms,
             g.loss_pct, g.controller_mem_mb > 0 ? "; device 0 (the controller) has its own mem_mb" : "");
    if (mi_cluster_save(&cl, NULL, desc, out, err))
        mi_fatal("cluster-gen: %s", err);
    printf("wrote %s: %d devices\n", out, cl.n_devices);
    mi_cluster_free(&cl);
    return 0;
}
