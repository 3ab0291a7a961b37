// cpu_baseline: how a loop that shares nothing scales with threads on this host, the baseline
// for contention_bench and thread_scaling (threads_check.sh runs it first).
//
//   cpu_baseline [--threads 1,2,4,8,16] [--steps N] [--repeats R]
//
// Each thread walks an array of its own (256 KiB, as an allocator's working set fits in a
// core's L2), reading and writing one 8-byte word a step at a pseudo-random index: no lock, no
// atomic, no line written by two threads. All threads are released at once; the median wall
// time of R runs counts. If two such threads make less than twice one thread's steps, the
// cores share something (hyper-threads of one physical core under the virtual machine,
// frequency, the last-level cache), and no allocator on this host can scale better.
// Prints a table and one `RESULT {json}` line per thread count.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

static uint64_t walk(uint64_t steps) {
    std::vector<uint64_t> words(32768, 1);  // 256 KiB
    uint64_t x = 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)words.data();
    for (uint64_t i = 0; i < steps; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        uint64_t &w = words[x & 32767];
        w = w * 3 + x;
    }
    uint64_t sum = 0;
    for (uint64_t w : words) sum += w;
    return sum;
}

int main(int argc, char **argv) {
    std::string threads_arg = "1,2,4,8,16";
    uint64_t steps = 2000000;
    int repeats = 3;
    for (int i = 1; i < argc; i++) {
        std::string s = argv[i];
        if (s == "--threads" && i + 1 < argc) threads_arg = argv[++i];
        else if (s == "--steps" && i + 1 < argc) steps = std::stoull(argv[++i]);
        else if (s == "--repeats" && i + 1 < argc) repeats = std::stoi(argv[++i]);
        else {
            std::fprintf(stderr, "usage: cpu_baseline [--threads 1,2,4,8,16] [--steps N] [--repeats R]\n");
            return 2;
        }
    }
    std::vector<int> counts;
    std::stringstream ss(threads_arg);
    for (std::string c; std::getline(ss, c, ',');) counts.push_back(std::stoi(c));
    std::printf("== cpu_baseline: %llu steps per thread, median of %d runs\n", (unsigned long long)steps, repeats);
    std::printf("| threads | total Msteps/s | vs 1 thread |\n|---:|---:|---:|\n");
    double single = 0;
    std::atomic<uint64_t> sink{0};
    for (int n : counts) {
        std::vector<double> walls;
        for (int r = 0; r < repeats; r++) {
            std::atomic<int> ready{0};
            std::atomic<bool> go{false};
            std::vector<std::thread> workers;
            for (int k = 0; k < n; k++) {
                workers.emplace_back([&] {
                    ready++;
                    while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
                    sink += walk(steps);
                });
            }
            while (ready.load() < n) std::this_thread::yield();
            auto t0 = std::chrono::steady_clock::now();
            go.store(true, std::memory_order_release);
            for (auto &w : workers) w.join();
            walls.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(walls.begin(), walls.end());
        double msteps = (double)steps * n / walls[walls.size() / 2] * 1e3;
        if (n == 1) single = msteps;
        std::printf("| %d | %.2f | %.2fx |\n", n, msteps, single > 0 ? msteps / single : 0.0);
        std::printf("RESULT {\"threads\": %d, \"msteps_per_s\": %.3f}\n", n, msteps);
    }
    return sink.load() == 42 ? 1 : 0;  // keeps the walks from being optimized away
}
