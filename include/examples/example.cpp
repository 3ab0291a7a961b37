// cachalot from C++: a small RAII wrapper (an allocator that frees itself, allocations that
// give themselves back, errors as exceptions), used over a simulated device.
//
//   c++ -std=c++17 example.cpp $(pkg-config --cflags --libs cachalot) -o example
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cachalot.h"

namespace cachalot {

// A failed call: the status code and cachalot's message.
class Error : public std::runtime_error {
   public:
    Error(cachalot_status status, const std::string &message) : std::runtime_error(message), status_(status) {}
    cachalot_status status() const { return status_; }

   private:
    cachalot_status status_;
};

inline void check(cachalot_status status) {
    if (status != CACHALOT_STATUS_OK) {
        std::string message(cachalot_last_error_message(nullptr, 0) + 1, '\0');
        cachalot_last_error_message(&message[0], message.size());
        message.pop_back();
        throw Error(status, std::string(cachalot_status_name(status)) + ": " + message);
    }
}

// Owns a cachalot_allocator; movable, not copyable.
class Allocator {
   public:
    static Allocator simulated(std::uint64_t capacity, const char *config = "") {
        cachalot_allocator *handle = nullptr;
        check(cachalot_allocator_new_simulated(capacity, config, &handle));
        return Allocator(handle);
    }
    static Allocator cuda(int device, const char *config = nullptr) {
        cachalot_allocator *handle = nullptr;
        check(cachalot_allocator_new_cuda(device, config, &handle));
        return Allocator(handle);
    }

    Allocator(Allocator &&other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
    Allocator &operator=(Allocator &&other) noexcept {
        std::swap(handle_, other.handle_);
        return *this;
    }
    Allocator(const Allocator &) = delete;
    Allocator &operator=(const Allocator &) = delete;
    ~Allocator() { cachalot_allocator_free(handle_); }

    void *malloc(std::size_t size, void *stream = nullptr) {
        void *ptr = nullptr;
        check(cachalot_malloc(handle_, size, stream, &ptr));
        return ptr;
    }
    void free(void *ptr) { check(cachalot_free(handle_, ptr)); }
    void empty_cache() { check(cachalot_empty_cache(handle_)); }

    cachalot_stats stats() const {
        cachalot_stats stats{};
        stats.struct_size = sizeof stats;
        check(cachalot_get_stats(handle_, &stats));
        return stats;
    }

    std::string memory_summary(bool abbreviated = false) const {
        std::size_t len = 0;
        check(cachalot_memory_summary(handle_, abbreviated, nullptr, 0, &len));
        std::string text(len, '\0');
        check(cachalot_memory_summary(handle_, abbreviated, &text[0], text.size(), &len));
        text.resize(len - 1);  // drop the NUL
        return text;
    }

   private:
    explicit Allocator(cachalot_allocator *handle) : handle_(handle) {}
    cachalot_allocator *handle_;
};

// One allocation, given back when it goes out of scope.
class Buffer {
   public:
    Buffer(Allocator &allocator, std::size_t size, void *stream = nullptr)
        : allocator_(&allocator), ptr_(allocator.malloc(size, stream)), size_(size) {}
    Buffer(Buffer &&other) noexcept
        : allocator_(other.allocator_), ptr_(std::exchange(other.ptr_, nullptr)), size_(other.size_) {}
    Buffer(const Buffer &) = delete;
    Buffer &operator=(const Buffer &) = delete;
    Buffer &operator=(Buffer &&) = delete;
    ~Buffer() { release(); }

    void *get() const { return ptr_; }
    std::size_t size() const { return size_; }

   private:
    void release() noexcept {  // destructors must not throw: report instead
        if (ptr_ == nullptr) {
            return;
        }
        try {
            allocator_->free(ptr_);
        } catch (const Error &e) {
            std::fprintf(stderr, "cachalot: freeing a buffer failed: %s\n", e.what());
        }
    }
    Allocator *allocator_;
    void *ptr_;
    std::size_t size_;
};

}  // namespace cachalot

int main() {
    using cachalot::Buffer;
    try {
        auto allocator = cachalot::Allocator::simulated(std::uint64_t{80} << 30, "policy:pytorch");
        {
            std::vector<Buffer> step;  // one "training step": its buffers die with the scope
            for (std::size_t size : {std::size_t{1} << 20, std::size_t{6} << 20, std::size_t{40} << 20}) {
                step.emplace_back(allocator, size);
            }
            Buffer scratch(allocator, 2048);
            std::printf("%s\n", allocator.memory_summary(true).c_str());
        }
        auto after = allocator.stats();
        std::printf("after the step: %lld allocations live, %lld bytes reserved (cached for reuse)\n",
                    static_cast<long long>(after.allocation.all.current),
                    static_cast<long long>(after.reserved_bytes.all.current));
        if (after.allocation.all.current != 0) {
            return 1;
        }

        // Errors are exceptions carrying cachalot's status and message.
        void *p = allocator.malloc(4096);
        allocator.free(p);
        try {
            allocator.free(p);
            return 1;
        } catch (const cachalot::Error &e) {
            if (e.status() != CACHALOT_STATUS_DOUBLE_FREE) {
                return 1;
            }
            std::printf("double free caught: %s\n", e.what());
        }
        allocator.empty_cache();
        std::printf("C++ example: ok\n");
        return 0;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
