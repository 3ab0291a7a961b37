// Reads the plain-text operations `trace_ops` writes (cli/examples/trace_ops.rs):
//   cachalot-ops 1 <ops> <slots>
//   a <slot> <size> <stream-hex>     allocate size bytes on stream into slot
//   f <slot>                         free the allocation in slot
// Invariant: a loaded file has exactly <ops> operations, every slot below <slots>.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

struct Op {
    bool alloc;
    uint32_t slot;
    uint64_t size;
    uint64_t stream;
};

struct Ops {
    std::vector<Op> ops;
    uint32_t slots = 0;
};

// Loads an ops file; on failure prints why and returns false.
inline bool load_ops(const char *path, Ops &out) {
    FILE *f = std::fopen(path, "r");
    if (f == nullptr) {
        std::fprintf(stderr, "cannot open %s\n", path);
        return false;
    }
    unsigned long long n = 0, slots = 0;
    int version = 0;
    if (std::fscanf(f, "cachalot-ops %d %llu %llu", &version, &n, &slots) != 3 || version != 1) {
        std::fprintf(stderr, "%s: not a cachalot-ops v1 file\n", path);
        std::fclose(f);
        return false;
    }
    out.ops.clear();
    out.ops.reserve(n);
    out.slots = static_cast<uint32_t>(slots);
    char kind[2];
    for (unsigned long long i = 0; i < n; i++) {
        Op op{};
        unsigned long long slot = 0, size = 0, stream = 0;
        if (std::fscanf(f, "%1s %llu", kind, &slot) != 2 || slot >= slots ||
            (kind[0] == 'a' && std::fscanf(f, "%llu %llx", &size, &stream) != 2) || (kind[0] != 'a' && kind[0] != 'f')) {
            std::fprintf(stderr, "%s: bad operation %llu\n", path, i);
            std::fclose(f);
            return false;
        }
        op.alloc = kind[0] == 'a';
        op.slot = static_cast<uint32_t>(slot);
        op.size = size;
        op.stream = stream;
        out.ops.push_back(op);
    }
    std::fclose(f);
    return true;
}
