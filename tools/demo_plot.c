/*
 * demo_plot.c - `pkv demo --plot FILE`: an SVG (written by hand, no library) of both runs over
 * their steps: KV utilization on top, running sequences below; pkv in blue, the contiguous
 * baseline in red. One shared step axis, so the shorter run is visibly shorter.
 */
#include <stdio.h>

#include "demo.h"

enum { WIDTH = 900, PANEL_H = 220, LEFT = 70, RIGHT = 20, TOP = 62, GAP = 60 };

static const char *const colors[2] = {"#1f6fb4", "#d62728"};

/* One run's series as a polyline in the panel whose top is y0; values scaled by ymax. */
static void series(FILE *f, const demo_result *r, int which, double ymax, uint64_t xmax, int y0,
                   const char *color) {
  const double plot_w = WIDTH - LEFT - RIGHT;
  const uint64_t stride = r->steps > 1500 ? r->steps / 1500 + 1 : 1;
  fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", color);
  for (uint64_t s = 0; s < r->steps; s += stride) {
    double v = which == 0 ? 100.0 * r->trace_util[s] : (double)r->trace_running[s];
    double x = LEFT + plot_w * (double)s / (double)(xmax > 1 ? xmax - 1 : 1);
    double y = y0 + PANEL_H - PANEL_H * (v / ymax);
    fprintf(f, "%.1f,%.1f ", x, y);
  }
  fprintf(f, "\"/>\n");
}

static void axes(FILE *f, int y0, const char *label, double ymax, uint64_t xmax) {
  fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#888\"/>\n",
          LEFT, y0, WIDTH - LEFT - RIGHT, PANEL_H);
  for (int k = 0; k <= 4; k++) {
    int y = y0 + PANEL_H - PANEL_H * k / 4;
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#eee\"/>\n", LEFT, y,
            WIDTH - RIGHT, y);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%.0f</text>\n", LEFT - 6, y + 4,
            ymax * k / 4);
  }
  fprintf(f, "<text x=\"%d\" y=\"%d\" font-weight=\"bold\">%s</text>\n", LEFT, y0 - 8, label);
  fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">step %llu</text>\n", WIDTH - RIGHT,
          y0 + PANEL_H + 16, (unsigned long long)xmax);
  fprintf(f, "<text x=\"%d\" y=\"%d\">step 0</text>\n", LEFT, y0 + PANEL_H + 16);
}

int demo_plot(const char *path, const demo_result *paged, const demo_result *contig,
              const demo_options *o) {
  FILE *f = fopen(path, "w");
  if (!f) {
    perror(path);
    return -1;
  }
  const demo_result *runs[2] = {paged, contig};
  uint64_t xmax = 1;
  double rmax = 1;
  for (int i = 0; i < 2; i++)
    if (runs[i]) {
      if (runs[i]->steps > xmax) xmax = runs[i]->steps;
      if (runs[i]->max_running > rmax) rmax = runs[i]->max_running;
    }
  rmax = (double)(((uint32_t)rmax + 3) / 4 * 4);
  const int height = TOP + 2 * PANEL_H + GAP + 50;
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
             "font-family=\"sans-serif\" font-size=\"12\">\n", WIDTH, height);
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  fprintf(f, "<text x=\"%d\" y=\"22\" font-size=\"15\" font-weight=\"bold\">pkv demo: %u requests, "
             "%u blocks x %u tokens, max_model_len %u</text>\n",
          LEFT, o->num_requests, o->num_blocks, o->block_size, o->max_model_len);
  for (int i = 0; i < 2; i++)
    if (runs[i])
      fprintf(f, "<text x=\"%d\" y=\"40\" fill=\"%s\">%s %s (%llu steps)</text>\n",
              LEFT + 300 * i, colors[i], i == 0 ? "&#9632;" : "&#9632;", runs[i]->name,
              (unsigned long long)runs[i]->steps);
  axes(f, TOP + 10, "KV utilization (% of the KV budget holding live tokens)", 100.0, xmax);
  axes(f, TOP + 10 + PANEL_H + GAP, "running sequences", rmax, xmax);
  for (int i = 0; i < 2; i++)
    if (runs[i]) {
      series(f, runs[i], 0, 100.0, xmax, TOP + 10, colors[i]);
      series(f, runs[i], 1, rmax, xmax, TOP + 10 + PANEL_H + GAP, colors[i]);
    }
  fprintf(f, "</svg>\n");
  if (fclose(f) != 0) {
    perror(path);
    return -1;
  }
  return 0;
}
