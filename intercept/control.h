/* control.h - suspension by vgpu-ctl and the launch gate (control.c). */
#ifndef VGPU_CONTROL_H
#define VGPU_CONTROL_H

#include <stdbool.h>

/* Set once the process has a movable range (host overcommit) or its
 * control thread runs (VGPU_CONTROL): launch, copy and memset hooks pass
 * the gate, and allocations may wait (atomic). */
extern bool vgpu__gate_on;
/* Turns vgpu__gate_on on. */
void vgpu__gate_use(void);

/* The control thread, started once per process (again in a forked child
 * that attaches a device). */
void vgpu__control_start(void);
/* At exit, before the ledgers are left: stops the thread; false if a pass
 * did not end in time (the ledgers must not be left then). */
bool vgpu__control_exit(void);
void vgpu__control_fork_child(void);
/* The process is leaving: a pass stops between two moves. */
bool vgpu__control_stopping(void);

/* A hook's way in and out: waits while the process is held. */
void vgpu__gate_enter(void);
void vgpu__gate_leave(void);
/* An allocation of device memory waits here while the process is held
 * (not inside the gate, nor on the control thread). */
void vgpu__control_wait(void);
/* Around moves of ranges (overcommit.c), on any thread: the moves of the
 * process take turns, and hooks of other threads wait at the gate until
 * the end, those already inside having left. false: one stayed inside
 * past wait_ms (stopped, or waiting on this thread): nothing is held, do
 * not move. Nested calls are counted (and always true). */
#define VGPU_MOVE_WAIT_MS 500
bool vgpu__moves_begin(unsigned wait_ms);
void vgpu__moves_end(void);
/* Whether the process is suspended (or being suspended) by vgpu-ctl: no
 * range comes back to the device but by the control thread's resume. */
bool vgpu__control_suspended(void);
/* Whether this thread is the control thread. */
bool vgpu__control_thread(void);

#endif
