// src/node_table.h directly (C++; the rest of suite unit goes through pkv.h): NodeTable, the flat
// open-addressing multimap key -> prefix-node ids behind PrefixTree's child lookups. Insert, find
// and erase; equal keys; keys that share a home slot, also across the wrap from the last slot to
// the first; growth over many inserts; erase's backward shift (no tombstones); and a randomized
// sequence against a std::unordered_map model, checked after every operation.
#include "node_table.h"

#include <algorithm>
#include <cstdio>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

int passed, failed;

bool check(bool ok, const char *what, int line) {
  ok ? passed++ : failed++;
  if (!ok) fprintf(stderr, "FAIL test_node_table.cpp:%d: %s\n", line, what);
  return ok;
}
#define CHECK(x) check((x), #x, __LINE__)

using pkv::NodeTable;

// Every node stored under key, sorted (find visits them all when f never accepts).
std::vector<uint32_t> nodes_of(const NodeTable &t, uint64_t key) {
  std::vector<uint32_t> out;
  const uint32_t r = t.find(key, [&](uint32_t n) {
    out.push_back(n);
    return false;
  });
  if (r != NodeTable::kEmpty) out.push_back(UINT32_MAX - 1);  // find must say "none" here
  std::sort(out.begin(), out.end());
  return out;
}

bool has(const NodeTable &t, uint64_t key, uint32_t node) {
  return t.find(key, [&](uint32_t n) { return n == node; }) == node;
}

// The home slot of key in a table of 2^bits slots, as node_table.h computes it (Fibonacci
// hashing), to build keys that collide. Only the choice of keys depends on it: every check below
// holds for any hash.
uint64_t home(uint64_t key, unsigned bits) { return (key * 0x9E3779B97F4A7C15ull) >> (64 - bits); }

// n keys whose home is `slot` in the 16-slot table a new NodeTable starts with.
std::vector<uint64_t> keys_homed_at(uint64_t slot, size_t n) {
  std::vector<uint64_t> keys;
  for (uint64_t k = 1; keys.size() < n; ++k)
    if (home(k, 4) == slot) keys.push_back(k);
  return keys;
}

void test_empty() {
  const NodeTable t;
  CHECK(t.size() == 0);
  CHECK(t.find(42, [](uint32_t) { return true; }) == NodeTable::kEmpty);
  CHECK(t.peek(42) == NodeTable::kEmpty);
  NodeTable u;
  CHECK(!u.erase(42, 1));  // nothing there: refused, nothing changed
  CHECK(u.size() == 0);
}

void test_insert_find_erase() {
  NodeTable t;
  t.insert(10, 1);
  t.insert(20, 2);
  t.insert(30, 3);
  CHECK(t.size() == 3);
  CHECK(has(t, 10, 1) && has(t, 20, 2) && has(t, 30, 3));
  CHECK(!has(t, 10, 2));  // the node is there, under another key
  CHECK(t.find(40, [](uint32_t) { return true; }) == NodeTable::kEmpty);
  NodeTable one;
  one.insert(20, 2);
  CHECK(one.peek(20) == 2);  // alone: at its home slot
  CHECK(t.erase(20, 2));
  CHECK(t.size() == 2);
  CHECK(!has(t, 20, 2) && has(t, 10, 1) && has(t, 30, 3));
  CHECK(!t.erase(20, 2));  // already gone
  CHECK(t.size() == 2);
}

// Equal keys (PrefixTree's children share a key when their hashes collide): find offers each
// node and the caller picks; erase removes exactly the named one.
void test_equal_keys() {
  NodeTable t;
  for (uint32_t n = 1; n <= 5; ++n) t.insert(77, n);
  CHECK(nodes_of(t, 77) == (std::vector<uint32_t>{1, 2, 3, 4, 5}));
  CHECK(has(t, 77, 4));
  CHECK(t.erase(77, 3));
  CHECK(nodes_of(t, 77) == (std::vector<uint32_t>{1, 2, 4, 5}));
  CHECK(!t.erase(77, 3));
  CHECK(t.size() == 4);
}

// One node id under two keys that share a home slot: erase must remove the pair it is given.
// (It matched the node alone, so erase(k2, 7) removed (k1, 7), the first of the probe path.)
void test_erase_matches_key_and_node() {
  const std::vector<uint64_t> k = keys_homed_at(3, 2);
  NodeTable t;
  t.insert(k[0], 7);
  t.insert(k[1], 7);
  CHECK(t.erase(k[1], 7));
  CHECK(has(t, k[0], 7));
  CHECK(!has(t, k[1], 7));
  CHECK(!t.erase(k[1], 7));
  CHECK(t.size() == 1);
}

// Entries homed at the given slots of the 16-slot table (one key per entry, distinct keys),
// erased in many orders: after each erase every other entry must still be found (erase's
// backward shift) and the erased one not. At most 7 entries, so the table stays at 16 slots.
void erase_in_every_order(const std::vector<uint64_t> &homes) {
  std::vector<std::pair<uint64_t, uint32_t>> entries;
  for (uint64_t h = 0; h < 16; ++h) {
    const size_t n = size_t(std::count(homes.begin(), homes.end(), h));
    for (uint64_t k : keys_homed_at(h, n)) entries.push_back({k, uint32_t(entries.size())});
  }
  std::vector<size_t> order(entries.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  int orders = 0;
  do {
    if (orders++ % 37 != 0) continue;  // 5040 orders of 7; every 37th is plenty
    NodeTable t;
    for (const auto &e : entries) t.insert(e.first, e.second);
    std::vector<bool> gone(entries.size(), false);
    for (size_t i : order) {
      if (!CHECK(t.erase(entries[i].first, entries[i].second))) return;
      gone[i] = true;
      for (size_t j = 0; j < entries.size(); ++j)
        if (!CHECK(has(t, entries[j].first, entries[j].second) == !gone[j])) return;
    }
    CHECK(t.size() == 0);
  } while (std::next_permutation(order.begin(), order.end()));
}

// Clusters that wrap from the last slot to the first, holding keys homed on both sides of the
// wrap, and one that does not wrap.
void test_collisions_and_wrap() {
  erase_in_every_order({15, 15, 15, 0, 0, 1, 1});
  erase_in_every_order({15, 0, 0, 0, 1, 14, 14});
  erase_in_every_order({3, 3, 4, 3, 6, 5, 9});
}

// Growth from 16 slots (and from a sized start) over many inserts; everything stays findable,
// through erases of half of it and inserts after them.
void test_growth() {
  for (size_t expected : {size_t(0), size_t(50000)}) {
    NodeTable t(expected);
    const uint32_t n = 100000;
    for (uint32_t i = 0; i < n; ++i) t.insert(uint64_t(i) * 1000003u, i);
    CHECK(t.size() == n);
    bool all = true;
    for (uint32_t i = 0; i < n; ++i) all = all && has(t, uint64_t(i) * 1000003u, i);
    CHECK(all);
    for (uint32_t i = 0; i < n; i += 2) all = all && t.erase(uint64_t(i) * 1000003u, i);
    CHECK(all);
    CHECK(t.size() == n / 2);
    for (uint32_t i = 0; i < n; ++i) all = all && has(t, uint64_t(i) * 1000003u, i) == (i % 2 == 1);
    CHECK(all);
    for (uint32_t i = 0; i < n; i += 2) t.insert(uint64_t(i) * 1000003u, n + i);
    for (uint32_t i = 0; i < n; ++i) all = all && has(t, uint64_t(i) * 1000003u, i % 2 ? i : n + i);
    CHECK(all);
    CHECK(t.size() == n);
  }
}

struct Rng {
  uint64_t s;
  uint64_t next() {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    return s;
  }
  uint64_t below(uint64_t n) { return next() % n; }
};

// Random inserts and erases against a model (key -> its nodes). Keys come from a small pool, so
// equal keys and shared home slots are common, plus fresh 64-bit keys; node ids are unique, as
// PrefixTree's are. After every operation: size, the touched key's nodes, and erase's answer.
// Every 500 operations, every key of the model.
void test_random_against_model(uint64_t seed, int ops) {
  Rng rng{seed * 0x9E3779B97F4A7C15ull + 1};
  NodeTable t;
  std::unordered_map<uint64_t, std::vector<uint32_t>> model;
  std::vector<std::pair<uint64_t, uint32_t>> live;  // what may be erased
  size_t size = 0;
  uint32_t next_node = 0;
  std::vector<uint64_t> pool(64);
  for (uint64_t &k : pool) k = rng.next();
  for (int op = 0; op < ops; ++op) {
    const uint64_t r = rng.below(100);
    uint64_t key;
    if (r < 55 || live.empty()) {  // insert
      key = r < 40 ? pool[rng.below(pool.size())] : rng.next();
      const uint32_t node = next_node++;
      t.insert(key, node);
      model[key].push_back(node);
      live.push_back({key, node});
      size++;
    } else if (r < 95) {  // erase a live pair
      const size_t i = rng.below(live.size());
      key = live[i].first;
      const uint32_t node = live[i].second;
      live[i] = live.back();
      live.pop_back();
      if (!CHECK(t.erase(key, node))) return;
      std::vector<uint32_t> &v = model[key];
      v.erase(std::find(v.begin(), v.end(), node));
      if (v.empty()) model.erase(key);
      size--;
    } else {  // erase a pair that is not there: a live node under another key, or a new node
      const auto &p = live[rng.below(live.size())];
      key = p.first ^ 1;
      const uint32_t node = r < 98 ? p.second : next_node + 1;
      const bool there =
          model.count(key) && std::count(model[key].begin(), model[key].end(), node) != 0;
      if (!CHECK(t.erase(key, node) == false || there)) return;
      if (there) {  // the rare case where key ^ 1 holds it after all
        std::vector<uint32_t> &v = model[key];
        v.erase(std::find(v.begin(), v.end(), node));
        if (v.empty()) model.erase(key);
        size--;
        live.erase(std::find(live.begin(), live.end(), std::make_pair(key, node)));
      }
    }
    if (!CHECK(t.size() == size)) return;
    std::vector<uint32_t> want = model.count(key) ? model[key] : std::vector<uint32_t>{};
    std::sort(want.begin(), want.end());
    if (!CHECK(nodes_of(t, key) == want)) return;
    if (op % 500 == 499) {
      for (const auto &kv : model) {
        std::vector<uint32_t> w = kv.second;
        std::sort(w.begin(), w.end());
        if (!CHECK(nodes_of(t, kv.first) == w)) return;
      }
    }
  }
}

}  // namespace

int main() {
  test_empty();
  test_insert_find_erase();
  test_equal_keys();
  test_erase_matches_key_and_node();
  test_collisions_and_wrap();
  test_growth();
  for (uint64_t seed = 1; seed <= 4; ++seed) test_random_against_model(seed, 40000);
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
