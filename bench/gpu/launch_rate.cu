// Host-side cost of launching an empty kernel through the CUDA runtime, which finds the driver's
// launch entry point through cuGetProcAddress: the path every real CUDA program takes, and the
// one libnvs.so interposes.
//
// usage: launch_rate [BURSTS [BURST]]   (default 2000 bursts of 256 launches)
//
// Each burst times only the launch calls: from before the first to after the last returns. The
// burst stays far under the GPU's launch queue depth (about 1024) and the queue is drained
// (cudaDeviceSynchronize, untimed) before every burst, so no launch call waits for the device:
// the time is the host's enqueue cost, not how fast the GPU drains empty kernels, which varies
// by tens of percent from run to run. Reported: the median burst's ns per launch.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void empty_kernel() {}

static void check(cudaError_t status, const char *what) {
    if (status != cudaSuccess) {
        std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(status));
        std::exit(1);
    }
}

// One burst of launches; returns ns per launch of the launch calls alone.
static double burst_ns_per_launch(int burst) {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < burst; i++) empty_kernel<<<1, 1>>>();
    auto end = std::chrono::steady_clock::now();
    check(cudaDeviceSynchronize(), "burst");
    check(cudaGetLastError(), "launch");
    return std::chrono::duration<double, std::nano>(end - start).count() / burst;
}

int main(int argc, char **argv) {
    const int bursts = argc > 1 ? std::atoi(argv[1]) : 2000;
    const int burst = argc > 2 ? std::atoi(argv[2]) : 256;
    if (bursts < 1 || burst < 1 || burst > 512) {
        std::fprintf(stderr, "usage: launch_rate [BURSTS [BURST (1-512)]]\n");
        return 2;
    }
    // The first launch creates the context (and under libnvs waits for the GPU lock); the rest
    // of the warm-up settles clocks and the driver's allocations.
    for (int i = 0; i < 100; i++) burst_ns_per_launch(burst);
    std::vector<double> samples(bursts);
    for (int i = 0; i < bursts; i++) samples[i] = burst_ns_per_launch(burst);
    std::sort(samples.begin(), samples.end());
    const double median = bursts % 2 ? samples[bursts / 2]
                                     : (samples[bursts / 2 - 1] + samples[bursts / 2]) / 2;
    std::printf("{\"launches_per_s\": %.1f, \"launch_ns\": %.2f, \"bursts\": %d, \"burst\": %d}\n",
                1e9 / median, median, bursts, burst);
    return 0;
}
