// Launch rate of an empty kernel through the CUDA runtime, which finds the driver's launch
// entry point through cuGetProcAddress: the path every real CUDA program takes.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <vector>

__global__ void empty_kernel() {}

static void check(cudaError_t status, const char *what) {
    if (status != cudaSuccess) {
        std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(status));
        std::exit(1);
    }
}

int main(int argc, char **argv) {
    const int launches = argc > 1 ? std::atoi(argv[1]) : 200000;
    const int repeats = 5;
    empty_kernel<<<1, 1>>>();
    check(cudaDeviceSynchronize(), "warm-up");
    std::vector<double> rates;
    for (int r = 0; r < repeats; r++) {
        auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < launches; i++) empty_kernel<<<1, 1>>>();
        check(cudaDeviceSynchronize(), "launch loop");
        std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
        rates.push_back(launches / took.count());
    }
    std::sort(rates.begin(), rates.end());
    std::printf("{\"launches_per_s\": %.1f}\n", rates[repeats / 2]);
    return 0;
}
