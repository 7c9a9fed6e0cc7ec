#include "metrics/metric_registry.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace crihook::metrics {

const std::vector<double>& latencyBuckets() {
  static const std::vector<double> kBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                               0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                               1,      2.5,     5,      10,    30};
  return kBuckets;
}

Histogram::Histogram(const std::vector<double>* bounds)
    : bounds_(bounds), buckets_(new std::atomic<uint64_t>[bounds->size() + 1]) {
  for (size_t i = 0; i <= bounds_->size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void Histogram::observe(double value) {
  // The first bound >= value: `le` is inclusive.
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_->begin(), bounds_->end(), value) -
                                       bounds_->begin());
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_->size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    s.cumulative.push_back(running);
  }
  // The count is the +Inf bucket, so the two always agree in one scrape.
  s.count = running;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

Registry::Entry& Registry::add(Entry entry) {
  MutexLock lock(mu_);
  for (auto& e : entries_) {
    if (e->kind == entry.kind && e->name == entry.name) return *e;
  }
  entries_.push_back(std::make_unique<Entry>(std::move(entry)));
  return *entries_.back();
}

Family<Counter>& Registry::counter(std::string name, std::string help,
                                   std::vector<std::string> label_names) {
  Entry e{Entry::Kind::kCounter};
  e.name = name;
  e.counter =
      std::make_unique<Family<Counter>>(std::move(name), std::move(help), std::move(label_names),
                                        [] { return std::make_unique<Counter>(); });
  return *add(std::move(e)).counter;
}

Family<Gauge>& Registry::gauge(std::string name, std::string help,
                               std::vector<std::string> label_names) {
  Entry e{Entry::Kind::kGauge};
  e.name = name;
  e.gauge =
      std::make_unique<Family<Gauge>>(std::move(name), std::move(help), std::move(label_names),
                                      [] { return std::make_unique<Gauge>(); });
  return *add(std::move(e)).gauge;
}

Family<Histogram>& Registry::histogram(std::string name, std::string help,
                                       std::vector<std::string> label_names,
                                       const std::vector<double>& bounds) {
  Entry e{Entry::Kind::kHistogram};
  e.name = name;
  e.bounds = std::make_unique<std::vector<double>>(bounds);
  const std::vector<double>* b = e.bounds.get();
  e.histogram =
      std::make_unique<Family<Histogram>>(std::move(name), std::move(help), std::move(label_names),
                                          [b] { return std::make_unique<Histogram>(b); });
  return *add(std::move(e)).histogram;
}

void Registry::gaugeFunction(std::string name, std::string help, std::function<double()> read) {
  Entry e{Entry::Kind::kGaugeFunction};
  e.name = std::move(name);
  e.help = std::move(help);
  e.read = std::move(read);
  add(std::move(e));
}

std::string escapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string escapeHelp(std::string_view help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string formatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{}", v);
}

namespace {

// {a="x",b="y"} with `extra` (e.g. le="0.5") appended; "" when there are no labels.
std::string labelText(const std::vector<std::string>& names, const std::vector<std::string>& values,
                      std::string_view extra = {}) {
  if (names.empty() && extra.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += ',';
    out += names[i];
    out += "=\"";
    out += escapeLabelValue(i < values.size() ? values[i] : "");
    out += '"';
  }
  if (!extra.empty()) {
    if (!names.empty()) out += ',';
    out += extra;
  }
  out += '}';
  return out;
}

void header(std::string& out, const std::string& name, const std::string& help,
            std::string_view type) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, escapeHelp(help),
                 name, type);
}

}  // namespace

std::string Registry::expose() const {
  std::string out;
  // A counter or gauge family: one line per series.
  auto single = [&out](const auto& f, const char* type) {
    header(out, f.name(), f.help(), type);
    f.forEach([&](const std::vector<std::string>& values, const auto& metric) {
      fmt::format_to(std::back_inserter(out), "{}{} {}\n", f.name(),
                     labelText(f.labelNames(), values), metric.value());
    });
  };
  MutexLock lock(mu_);
  for (const auto& e : entries_) {
    switch (e->kind) {
      case Entry::Kind::kCounter:
        single(*e->counter, "counter");
        break;
      case Entry::Kind::kGauge:
        single(*e->gauge, "gauge");
        break;
      case Entry::Kind::kHistogram: {
        const auto& f = *e->histogram;
        header(out, f.name(), f.help(), "histogram");
        f.forEach([&](const std::vector<std::string>& values, const Histogram& h) {
          const Histogram::Snapshot s = h.snapshot();
          for (size_t i = 0; i < s.cumulative.size(); ++i) {
            const std::string le = i < h.bounds().size()
                                       ? fmt::format("le=\"{}\"", formatValue(h.bounds()[i]))
                                       : std::string("le=\"+Inf\"");
            fmt::format_to(std::back_inserter(out), "{}_bucket{} {}\n", f.name(),
                           labelText(f.labelNames(), values, le), s.cumulative[i]);
          }
          const std::string labels = labelText(f.labelNames(), values);
          fmt::format_to(std::back_inserter(out), "{}_sum{} {}\n{}_count{} {}\n", f.name(), labels,
                         formatValue(s.sum), f.name(), labels, s.count);
        });
        break;
      }
      case Entry::Kind::kGaugeFunction:
        header(out, e->name, e->help, "gauge");
        fmt::format_to(std::back_inserter(out), "{} {}\n", e->name, formatValue(e->read()));
        break;
    }
  }
  return out;
}

}  // namespace crihook::metrics
