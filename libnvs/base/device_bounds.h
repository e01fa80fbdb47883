/* How many devices libnvs keeps state for. */
#ifndef GS_DEVICE_BOUNDS_H
#define GS_DEVICE_BOUNDS_H

/* Devices (CUDA ordinals of this process) whose locks it takes: each has a gate and a lock.
 * Work on a device past them runs ungated, after one stderr line saying so. Far above the GPUs
 * of one node, small enough to scan every device on each turn of the client thread. */
#define GS_GATED_DEVICES 16

#endif
