/*
 * demo_plot.c - `pkv demo --plot FILE`: an SVG (written by hand, no library) with one panel per
 * run of the demo (pkv, the contiguous baseline, the host tier's run; or the store's cold and warm
 * runs). Each panel shows, per step, the share of the KV budget reserved for running sequences
 * (light) against the share holding live tokens (dark), and the running sequences (line, right
 * axis). The y scales are shared so panels compare; each panel has its own step axis with ticks,
 * because a pkv step computes several times the tokens of a contiguous one and one shared axis
 * squeezed pkv's 273 steps into a quarter of the width.
 */
#include <stdio.h>
#include <string.h>

#include "demo.h"

enum { WIDTH = 960, LEFT = 64, RIGHT = 70, TOP = 112, PANEL_H = 150, GAP = 78, MAX_POINTS = 1500 };
enum { PLOT_W = WIDTH - LEFT - RIGHT };

/* A run's hue by its name, the same in every plot (dark = used, light = reserved). */
static const char *color_of(const char *name) {
  static const char *const names[] = {"contiguous", "pkv + host tier", "cold", "warm"};
  static const char *const colors[] = {"#d62728", "#2ca02c", "#9467bd", "#e377c2"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(name, names[i]) == 0) return colors[i];
  return "#1f6fb4"; /* pkv (paged) */
}

/* A tick spacing of 1, 2 or 5 x 10^k giving at most `want` intervals up to max. */
static uint64_t tick_step(uint64_t max, uint64_t want) {
  static const uint64_t mult[3] = {1, 2, 5};
  for (uint64_t p = 1;; p *= 10)
    for (int i = 0; i < 3; i++)
      if (max / (mult[i] * p) <= want) return mult[i] * p;
}

/* x of the end of step s (1-based; 0 = the start) on a panel of `steps` steps. */
static double px(uint64_t s, uint64_t steps) {
  return LEFT + PLOT_W * (double)s / (double)(steps ? steps : 1);
}

/* The trace's value at step index s: 0 used, 1 reserved (both % of the budget), 2 running. */
static double value(const demo_result *r, int which, uint64_t s) {
  return which == 0   ? 100.0 * r->trace_util[s]
         : which == 1 ? 100.0 * r->trace_reserved[s]
                      : (double)r->trace_running[s];
}

/* One series of r in the panel whose top is y0: used and reserved as areas down to 0 in the run's
 * color, running sequences as a line. */
static void series(FILE *f, const demo_result *r, int which, double ymax, int y0,
                   const char *color) {
  const uint64_t stride = r->steps > MAX_POINTS ? r->steps / MAX_POINTS + 1 : 1;
  const double base = y0 + PANEL_H;
  const int area = which != 2;
  if (area)
    fprintf(f, "<polygon fill=\"%s\" fill-opacity=\"%s\" stroke=\"none\" points=\"%.1f,%.1f ",
            color, which == 1 ? "0.25" : "0.8", px(0, r->steps), base);
  else
    fprintf(f, "<polyline fill=\"none\" stroke=\"#222\" stroke-width=\"1.2\" points=\"");
  for (uint64_t s = 0; s < r->steps; s += stride) {
    const double y = base - PANEL_H * (value(r, which, s) / ymax);
    const uint64_t end = s + stride < r->steps ? s + stride : r->steps;
    /* a step's value holds over the whole step: both its ends */
    fprintf(f, "%.1f,%.1f %.1f,%.1f ", px(s, r->steps), y, px(end, r->steps), y);
  }
  if (area) fprintf(f, "%.1f,%.1f", px(r->steps, r->steps), base);
  fprintf(f, "\"/>\n");
}

/* The panel's frame, its y grid (% left, running sequences right) and its step ticks. */
static void axes(FILE *f, const demo_result *r, int y0, double rmax) {
  fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#888\"/>\n",
          LEFT, y0, PLOT_W, PANEL_H);
  for (int k = 0; k <= 4; k++) {
    const int y = y0 + PANEL_H - PANEL_H * k / 4;
    if (k > 0 && k < 4)
      fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#e4e4e4\"/>\n", LEFT, y,
              LEFT + PLOT_W, y);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%d%%</text>\n", LEFT - 6, y + 4,
            25 * k);
    fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"#444\">%.0f</text>\n", LEFT + PLOT_W + 6, y + 4,
            rmax * k / 4);
  }
  const uint64_t tick = tick_step(r->steps, 8);
  for (uint64_t s = 0; s <= r->steps; s += tick) {
    const double x = px(s, r->steps);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#888\"/>\n", x,
            y0 + PANEL_H, x, y0 + PANEL_H + 5);
    fprintf(f, "<text class=\"xtick\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%llu</text>\n", x,
            y0 + PANEL_H + 18, (unsigned long long)s);
  }
  fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" fill=\"#444\">step</text>\n",
          LEFT + PLOT_W + RIGHT - 4, y0 + PANEL_H + 18);
  fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"#444\">seqs</text>\n", LEFT + PLOT_W + 6, y0 - 10);
}

/* One run's panel: title line with its numbers, then reserved, used and running. */
static void panel(FILE *f, const demo_result *r, int y0, double rmax) {
  const char *color = color_of(r->name);
  const double steps = r->steps ? (double)r->steps : 1;
  double reserved = 0;
  for (uint64_t s = 0; s < r->steps; s++) reserved += r->trace_reserved[s];
  fprintf(f, "<g class=\"panel\" data-run=\"%s\">\n", r->name);
  fprintf(f,
          "<text x=\"%d\" y=\"%d\"><tspan font-weight=\"bold\" fill=\"%s\">%s</tspan>: %llu "
          "steps; KV reserved %.0f%% / used %.0f%% of the budget (mean); running sequences "
          "%.1f mean, %u max</text>\n",
          LEFT, y0 - 10, color, r->name, (unsigned long long)r->steps, 100.0 * reserved / steps,
          100.0 * r->util_sum / steps, (double)r->sum_running / steps, r->max_running);
  axes(f, r, y0, rmax);
  if (r->steps) {
    series(f, r, 1, 100.0, y0, color);
    series(f, r, 0, 100.0, y0, color);
    series(f, r, 2, rmax, y0, color);
  }
  fprintf(f, "</g>\n");
}

/* The legend's three swatches, under the title. */
static void legend(FILE *f) {
  static const char *const what[3] = {
      "KV reserved: held for running sequences (a contiguous slot: max_model_len)",
      "KV used: live tokens", "running sequences (right axis)"};
  for (int i = 0; i < 3; i++) {
    const int y = 60 + 16 * i;
    if (i < 2)
      fprintf(f,
              "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"10\" fill=\"#555\" "
              "fill-opacity=\"%s\"/>\n",
              LEFT, y - 9, i == 0 ? "0.25" : "0.8");
    else
      fprintf(
          f,
          "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#222\" stroke-width=\"1.2\"/>\n",
          LEFT, y - 4, LEFT + 14, y - 4);
    fprintf(f, "<text x=\"%d\" y=\"%d\">%s</text>\n", LEFT + 20, y, what[i]);
  }
}

int demo_plot(const char *path, const demo_result *const *runs, uint32_t num_runs,
              const demo_options *o) {
  FILE *f = fopen(path, "w");
  if (!f) {
    perror(path);
    return -1;
  }
  uint32_t rmax = 4;
  for (uint32_t i = 0; i < num_runs; i++)
    if (runs[i]->max_running > rmax) rmax = runs[i]->max_running;
  rmax = (rmax + 3) / 4 * 4; /* four equal grid steps of whole sequences */
  const int height = TOP + (int)num_runs * (PANEL_H + GAP);
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
          "font-family=\"sans-serif\" font-size=\"12\">\n",
          WIDTH, height);
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  fprintf(f,
          "<text x=\"%d\" y=\"22\" font-size=\"15\" font-weight=\"bold\">pkv demo: %u requests; "
          "KV budget %u blocks x %u tokens, max_model_len %u</text>\n",
          LEFT, o->num_requests, o->num_blocks, o->block_size, o->max_model_len);
  fprintf(f,
          "<text x=\"%d\" y=\"40\">One panel per run, each over its own steps (ticks below it); "
          "the y scales are shared.</text>\n",
          LEFT);
  legend(f);
  for (uint32_t i = 0; i < num_runs; i++)
    panel(f, runs[i], TOP + 26 + (int)i * (PANEL_H + GAP), (double)rmax);
  fprintf(f, "</svg>\n");
  if (fclose(f) != 0) {
    perror(path);
    return -1;
  }
  return 0;
}
