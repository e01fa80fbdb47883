// One CUDA program for the MPS fact-finding bench (bench/mps_facts.py): each mode is one thing
// an MPS client might do. Prints one JSON line. Built with nvcc on the GPU machine.
//   mps_probe [--setenv PIPE_DIR] init SECONDS     start the driver, then stay SECONDS
//   mps_probe [--setenv PIPE_DIR] managed MIB      managed memory: fill, move out and back, check
//   mps_probe [--setenv PIPE_DIR] spin SECONDS     kernels back to back, checking each 10 ms
//   mps_probe [--setenv PIPE_DIR] fault            one kernel that writes to an illegal address
// --setenv sets CUDA_MPS_PIPE_DIRECTORY inside the process before the first CUDA call, as
// libnvs does, to show that the driver reads it then and not at exec.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

__global__ void fill(unsigned *data, size_t count, unsigned value) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        data[i] = value + (unsigned)i;
}

__global__ void check(const unsigned *data, size_t count, unsigned value, unsigned *bad) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        if (data[i] != value + (unsigned)i) atomicAdd(bad, 1u);
}

__global__ void busy(float *out, int rounds) {
    float x = threadIdx.x;
    for (int i = 0; i < rounds; i++) x = x * 1.0000001f + 0.5f;
    out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}

__global__ void wild(int *p) { *p = 1; }

static int report_error(const char *mode, cudaError_t err, double t0) {
    printf("{\"mode\": \"%s\", \"pid\": %d, \"ok\": false, \"error\": \"%s\", \"after_s\": %.3f}\n",
           mode, getpid(), cudaGetErrorName(err), now_s() - t0);
    return 1;
}

int main(int argc, char **argv) {
    int arg = 1;
    if (argc > 2 && strcmp(argv[1], "--setenv") == 0) {
        setenv("CUDA_MPS_PIPE_DIRECTORY", argv[2], 1);
        arg = 3;
    }
    if (argc <= arg) {
        fprintf(stderr, "usage: mps_probe [--setenv DIR] init S | managed MIB | spin S | fault\n");
        return 2;
    }
    const char *mode = argv[arg];
    double value = argc > arg + 1 ? atof(argv[arg + 1]) : 0;
    double t0 = now_s();
    cudaError_t err = cudaFree(0);  // the driver starts here
    if (err != cudaSuccess) return report_error(mode, err, t0);
    double started = now_s() - t0;
    if (strcmp(mode, "init") == 0) {
        printf("{\"mode\": \"init\", \"pid\": %d, \"ok\": true, \"init_s\": %.3f}\n", getpid(),
               started);
        fflush(stdout);
        usleep((useconds_t)(value * 1e6));
        return 0;
    }
    if (strcmp(mode, "managed") == 0) {
        size_t bytes = (size_t)value << 20, count = bytes / sizeof(unsigned);
        unsigned *data, *bad;
        if ((err = cudaMallocManaged(&data, bytes)) != cudaSuccess ||
            (err = cudaMallocManaged(&bad, sizeof(unsigned))) != cudaSuccess)
            return report_error(mode, err, t0);
        *bad = 0;
        cudaMemLocation gpu = {cudaMemLocationTypeDevice, 0}, host = {cudaMemLocationTypeHost, 0};
        fill<<<1024, 256>>>(data, count, 7);
        if ((err = cudaDeviceSynchronize()) != cudaSuccess) return report_error(mode, err, t0);
        double a = now_s();
        err = cudaMemPrefetchAsync(data, bytes, host, 0, 0);
        if (err == cudaSuccess) err = cudaDeviceSynchronize();
        double out_s = now_s() - a;
        if (err != cudaSuccess) return report_error(mode, err, t0);
        a = now_s();
        err = cudaMemPrefetchAsync(data, bytes, gpu, 0, 0);
        if (err == cudaSuccess) err = cudaDeviceSynchronize();
        double in_s = now_s() - a;
        if (err != cudaSuccess) return report_error(mode, err, t0);
        check<<<1024, 256>>>(data, count, 7, bad);
        if ((err = cudaDeviceSynchronize()) != cudaSuccess) return report_error(mode, err, t0);
        printf("{\"mode\": \"managed\", \"pid\": %d, \"ok\": %s, \"bytes\": %zu, \"out_s\": %.4f, "
               "\"in_s\": %.4f, \"out_gbps\": %.2f, \"in_gbps\": %.2f, \"wrong\": %u}\n", getpid(),
               *bad == 0 ? "true" : "false", bytes, out_s, in_s, bytes / out_s / 1e9,
               bytes / in_s / 1e9, *bad);
        return *bad != 0;
    }
    if (strcmp(mode, "spin") == 0) {
        float *out;
        if ((err = cudaMalloc(&out, 1024 * 256 * sizeof(float))) != cudaSuccess)
            return report_error(mode, err, t0);
        long kernels = 0;
        double end = now_s() + value;
        while (now_s() < end) {
            busy<<<1024, 256>>>(out, 2000);
            kernels++;
            if ((err = cudaDeviceSynchronize()) != cudaSuccess) {
                printf("{\"mode\": \"spin\", \"pid\": %d, \"ok\": false, \"error\": \"%s\", "
                       "\"kernels\": %ld, \"after_s\": %.3f}\n", getpid(), cudaGetErrorName(err),
                       kernels, now_s() - t0);
                return 1;
            }
        }
        printf("{\"mode\": \"spin\", \"pid\": %d, \"ok\": true, \"kernels\": %ld}\n", getpid(),
               kernels);
        return 0;
    }
    if (strcmp(mode, "fault") == 0) {
        wild<<<1, 1>>>((int *)0x10);
        err = cudaDeviceSynchronize();
        printf("{\"mode\": \"fault\", \"pid\": %d, \"error\": \"%s\"}\n", getpid(),
               cudaGetErrorName(err));
        return 0;
    }
    fprintf(stderr, "mps_probe: unknown mode %s\n", mode);
    return 2;
}
