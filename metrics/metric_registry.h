#pragma once

// crihookd's metrics: counters, gauges and histograms in families with
// labels, and their Prometheus text exposition (format 0.0.4).
//
// The data path only touches atomics: a series (one label set of a family)
// is created once, under its family's mutex, and its pointer is kept by the
// caller; recording into it is a relaxed atomic add. Families live as long
// as their Registry; series are never removed, so pointers stay valid.
// Label values come from configuration and known tables, never straight
// from a request; still, each family holds at most kMaxSeriesPerFamily
// series (past it, one series whose every label is "overflow" takes the
// rest), so no input can grow memory without bound.

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/mutex.h"

namespace crihook::metrics {

// Past this many label sets a family records into its "overflow" series.
// crihookd's own families stay far below it: 2 APIs x ~45 CRI methods x 17
// codes at worst for the calls, hooks x 16 stages for the hooks.
constexpr size_t kMaxSeriesPerFamily = 4096;

// Latency buckets, in seconds: 100 us (a relayed tiny call) to 30 s (a slow
// device init or a hung hook cut at its timeout).
const std::vector<double>& latencyBuckets();

class Counter {
 public:
  void inc(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

class Gauge {
 public:
  void add(int64_t n) { value_.fetch_add(n, std::memory_order_relaxed); }
  void set(int64_t v) { value_.store(v, std::memory_order_relaxed); }
  int64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> value_{0};
};

// Cumulative buckets are computed at exposition; observe() adds to one
// bucket, the count and the sum (three relaxed atomics), so a reader may see
// them a few observations apart, never torn values.
class Histogram {
 public:
  // `bounds`: ascending upper bounds (le), without +Inf. Must outlive this.
  explicit Histogram(const std::vector<double>* bounds);
  void observe(double value);

  struct Snapshot {
    std::vector<uint64_t> cumulative;  // one per bound, then +Inf (== count)
    uint64_t count = 0;
    double sum = 0;
  };
  Snapshot snapshot() const;
  const std::vector<double>& bounds() const { return *bounds_; }

 private:
  const std::vector<double>* bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // bounds_->size() + 1
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0};
};

// One metric name with its label names; a series per label-value set.
template <typename M>
class Family {
 public:
  Family(std::string name, std::string help, std::vector<std::string> label_names,
         std::function<std::unique_ptr<M>()> make)
      : name_(std::move(name)),
        help_(std::move(help)),
        label_names_(std::move(label_names)),
        make_(std::move(make)) {}

  // The series for `values` (as many as label names), created on first use.
  // Locks the family: call it once and keep the reference, not per event.
  M& with(const std::vector<std::string>& values) {
    MutexLock lock(mu_);
    auto it = series_.find(values);
    if (it != series_.end()) return *it->second;
    if (series_.size() >= kMaxSeriesPerFamily) {
      std::vector<std::string> overflow(label_names_.size(), "overflow");
      auto& slot = series_[overflow];
      if (!slot) slot = make_();
      return *slot;
    }
    auto& slot = series_[values];
    slot = make_();
    return *slot;
  }

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const std::vector<std::string>& labelNames() const { return label_names_; }

  // Calls `f(values, series)` for each series in label order, under the lock
  // (series are only added under it, so the pointers are stable anyway).
  template <typename F>
  void forEach(F&& f) const {
    MutexLock lock(mu_);
    for (const auto& [values, m] : series_) f(values, *m);
  }

 private:
  std::string name_, help_;
  std::vector<std::string> label_names_;
  std::function<std::unique_ptr<M>()> make_;
  mutable Mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<M>> series_ ABSL_GUARDED_BY(mu_);
};

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Families. `name` must be a valid metric name (crihook_*; counters end in
  // _total), label names valid label names. Asking again for a name already
  // made returns that family (its help and labels as first given), so parts
  // made several times (a hook per [[hook]] entry) share it. Thread-safe;
  // the reference lives as long as the registry.
  Family<Counter>& counter(std::string name, std::string help,
                           std::vector<std::string> label_names = {});
  Family<Gauge>& gauge(std::string name, std::string help,
                       std::vector<std::string> label_names = {});
  Family<Histogram>& histogram(std::string name, std::string help,
                               std::vector<std::string> label_names,
                               const std::vector<double>& bounds = latencyBuckets());

  // A gauge whose value is read at exposition time (e.g. an atomic some part
  // keeps anyway). `read` must be thread-safe and stay callable as long as
  // the registry is exposed; it must not block.
  void gaugeFunction(std::string name, std::string help, std::function<double()> read);

  // The text exposition format 0.0.4: HELP and TYPE per family, in the order
  // the families were made, series in label order. Thread-safe.
  std::string expose() const;

 private:
  struct Entry {
    enum class Kind { kCounter, kGauge, kHistogram, kGaugeFunction } kind;
    std::unique_ptr<Family<Counter>> counter;
    std::unique_ptr<Family<Gauge>> gauge;
    std::unique_ptr<Family<Histogram>> histogram;
    std::unique_ptr<std::vector<double>> bounds;
    std::string name, help;
    std::function<double()> read;
  };
  Entry& add(Entry entry);

  mutable Mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
};

// The exposition format's escaping: in label values \ " and newline; in
// HELP text \ and newline.
std::string escapeLabelValue(std::string_view value);
std::string escapeHelp(std::string_view help);
// A sample value: integers as integers, +Inf/-Inf/NaN as the format spells them.
std::string formatValue(double v);

}  // namespace crihook::metrics
