// Renders the sample plots in docs/img/ (line plot, token heatmap, layers x heads grid).
// Build and run from the repository root after building the library:
//   g++ -std=c++20 -O1 -Iinclude tools/plot_samples.cpp build/libqkv.a -o /tmp/plot_samples
//       $(pkg-config --libs cairo) && /tmp/plot_samples docs/img   (one command line)
#include <cmath>
#include <string>
#include <vector>

#include "qkv/util/plot.h"

using namespace qkv::util;

int main(int argc, char** argv) {
    const std::string dir = argc > 1 ? argv[1] : ".";

    LinePlot p;
    p.title  = "Transformer training (D2L EN)";
    p.xlabel = "epoch";
    p.ylabel = "loss";
    Series tr, va, sc;
    tr.label  = "train_loss";
    va.label  = "val_loss";
    va.marker = Marker::circle;
    va.dashed = true;
    sc.label  = "samples";
    sc.line   = false;
    sc.marker = Marker::cross;
    for (int i = 0; i <= 30; ++i) {
        tr.x.push_back(i);
        tr.y.push_back(4.6 * std::exp(-i / 4.0) + 0.18);
        if (i % 2 == 0) {
            va.x.push_back(i);
            va.y.push_back(2.3 * std::exp(-i / 10.0) + 1.6 + 0.1 * std::sin(i));
        }
    }
    for (int i = 0; i < 12; ++i) {
        sc.x.push_back(i * 2.5);
        sc.y.push_back(2.5 + std::sin(i));
    }
    p.add(tr).add(va).add(sc);
    p.save(dir + "/plot_line.png");

    const std::vector<std::string> src = {"i'm", "calm", ".", "<eos>", "<pad>", "<pad>"};
    const std::vector<std::string> tgt = {"je", "suis", "calme", ".", "<eos>"};
    std::vector<double> w;
    for (size_t i = 0; i < tgt.size(); ++i) {
        std::vector<double> row;
        double s = 0;
        for (size_t j = 0; j < src.size(); ++j) {
            const double v = j < 4 ? std::exp(-2.0 * std::abs(double(i) - double(j) * 1.2)) : 0.0;
            row.push_back(v);
            s += v;
        }
        for (double v : row) w.push_back(v / s);
    }
    Heatmap h(w, int64_t(tgt.size()), int64_t(src.size()));
    h.title      = "Decoder cross-attention";
    h.xlabel     = "Keys";
    h.ylabel     = "Queries";
    h.row_labels = tgt;
    h.col_labels = src;
    h.save(dir + "/plot_heatmap.png");

    HeatmapGrid g(2, 4);
    g.xlabel = "Key positions";
    g.ylabel = "Query positions";
    for (int l = 0; l < 2; ++l)
        for (int hd = 0; hd < 4; ++hd) {
            HeatmapPanel pn;
            pn.rows  = 10;
            pn.cols  = 10;
            pn.title = "Head " + std::to_string(hd + 1);
            for (int i = 0; i < 10; ++i) {
                std::vector<double> row;
                double s = 0;
                for (int j = 0; j < 10; ++j) {
                    const double v = j <= i ? std::exp(-std::abs(i - j - hd) * (l + 1.0)) : 0.0;
                    row.push_back(v);
                    s += v;
                }
                for (double v : row) pn.values.push_back(v / s);
            }
            g.set(l, hd, pn);
        }
    g.save(dir + "/plot_heatmap_grid.png");
    return 0;
}
