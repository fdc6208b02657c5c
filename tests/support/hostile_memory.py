"""A process whose memory is hostile to its readers (issue 38), built with the C compiler.

    binary = build(tmp_dir)   # None without gcc/cc
    subprocess.Popen([binary, "--fuse", FILE, "--openblas", LIB, "--churn", EXE, "--polars"])

What each option makes it do (any subset, all at once):

--fuse FILE       maps FILE (a file of a FUSE mount whose reads never return:
                  `tests/support/fuse_stall.py`) executable and never touches it; starts
                  `--threads` threads (4) that keep 64 addresses inside it in a local array
                  (the outermost frames of their stacks, and within 2 KiB of their stack
                  pointer) and wake every 20 ms, sleeping in the C library between (row 1);
--openblas LIB    maps the first page of LIB (a small valid ELF named like OpenBLAS that
                  exports `blas_cpu_number` at 0x1000) and, right after it, two pages of the
                  FUSE FILE: `load base + symbol` lies in the FUSE page (row 2; needs --fuse);
--churn EXE       maps EXE (a large regular file: 16 MiB of zeros) executable and starts
                  `--rate` threads a second (80), each holding `--words` fresh addresses
                  into it (3,000) on its stack for `--life` seconds (0.5) (row 3);
--polars          two threads named `polars-0` and `polars-1` spin (row 4);
--hold-lock       once "ready" is printed, a thread reads the FUSE page through /proc/self/mem
                  (the kernel holds the process's mmap lock while that read waits, forever)
                  and, 100 ms later, another maps a page (a writer waiting for that lock):
                  every reader of its cmdline, environ or mem waits from then on, killably
                  only, and so does any thread of it that maps memory (needs --fuse);
--remap PAGE      the remap race (rows 1 and 2 against a check made before the read): maps
                  two pages of PAGE (a regular file on a local disk) executable at an address
                  A, and a thread swaps them in a loop (mmap MAP_FIXED) for the first two
                  pages of the FUSE FILE and back; starts `--rate` threads a second (80) that
                  each hold 64 addresses into A on their stacks for `--life` s (0.5), waking
                  every 20 ms; with --openblas, A is the two pages right after the library's
                  page, so `load base + blas_cpu_number` lies in them (needs --fuse);
--exec PROGRAM    after the rest is set up and "ready" printed, waits for a line on stdin
                  and execs PROGRAM (row 5).

It prints "ready" once everything is mapped and started, then sleeps.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SOURCE = r"""
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

static uint8_t *fuse_base, *churn_base, *remap_base;
static int remap_local = -1, remap_fuse = -1;
static size_t churn_size;
static long words = 3000;
static double life = 0.5;

static void *map_file(const char *path, size_t *size, int prot) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) { perror(path); exit(2); }
    off_t end = lseek(fd, 0, SEEK_END);
    void *p = mmap(NULL, (size_t)end, prot, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) { perror("mmap"); exit(2); }
    close(fd);
    if (size) *size = (size_t)end;
    return p;
}

static void *fuse_keeper(void *arg) {
    volatile uint64_t held[64];
    for (int i = 0; i < 64; i++)
        held[i] = (uint64_t)(fuse_base + 64 + 32 * i);
    for (;;) usleep(20000);  /* runs a little: its process is read at every sample */
    return (void *)held[0];
}

static void *churner(void *arg) {
    uint64_t seed = (uint64_t)(uintptr_t)arg;
    volatile uint64_t *held = __builtin_alloca(words * sizeof(uint64_t));
    for (long i = 0; i < words; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        held[i] = (uint64_t)(churn_base + 8 + (seed >> 11) % (churn_size - 8));
    }
    struct timespec t = {(time_t)life, (long)((life - (time_t)life) * 1e9)};
    nanosleep(&t, NULL);
    return (void *)held[0];
}

static void *swapper(void *arg) {
    const int prot = PROT_READ | PROT_EXEC, flags = MAP_PRIVATE | MAP_FIXED;
    for (;;) {
        if (mmap(remap_base, 2 * 4096, prot, flags, remap_local, 0) == MAP_FAILED
            || mmap(remap_base, 2 * 4096, prot, flags, remap_fuse, 0) == MAP_FAILED) {
            perror("mmap remap");
            exit(2);
        }
    }
    return arg;
}

static void *remap_holder(void *arg) {
    volatile uint64_t held[64];
    for (int i = 0; i < 64; i++)
        held[i] = (uint64_t)(remap_base + 64 + 96 * i);
    for (int i = 0; i < (int)(life * 50); i++) usleep(20000);
    return (void *)held[0];
}

static void *self_reader(void *arg) {
    int fd = open("/proc/self/mem", O_RDONLY);
    char byte;
    if (fd >= 0) pread(fd, &byte, 1, (off_t)(uintptr_t)fuse_base);
    return arg;
}

static void *lock_writer(void *arg) {
    usleep(100000);
    mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return arg;
}

static void *spinner(void *arg) {
    prctl(PR_SET_NAME, (unsigned long)arg, 0, 0, 0);
    volatile uint64_t x = 0;
    for (;;) x++;
    return NULL;
}

int main(int argc, char **argv) {
    const char *fuse = NULL, *openblas = NULL, *churn = NULL, *exec_path = NULL, *remap = NULL;
    int threads = 4, polars = 0, hold = 0;
    double rate = 80;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--fuse")) fuse = argv[++i];
        else if (!strcmp(argv[i], "--openblas")) openblas = argv[++i];
        else if (!strcmp(argv[i], "--churn")) churn = argv[++i];
        else if (!strcmp(argv[i], "--polars")) polars = 1;
        else if (!strcmp(argv[i], "--hold-lock")) hold = 1;
        else if (!strcmp(argv[i], "--remap")) remap = argv[++i];
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rate")) rate = atof(argv[++i]);
        else if (!strcmp(argv[i], "--words")) words = atol(argv[++i]);
        else if (!strcmp(argv[i], "--life")) life = atof(argv[++i]);
        else if (!strcmp(argv[i], "--exec")) exec_path = argv[++i];
        else { fprintf(stderr, "unknown option %s\n", argv[i]); return 2; }
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    if (fuse) {
        fuse_base = map_file(fuse, NULL, PROT_READ | PROT_EXEC);
        for (int i = 0; i < threads; i++) pthread_create(&t, &attr, fuse_keeper, NULL);
    }
    if ((openblas || remap || hold) && !fuse) {
        fprintf(stderr, "--openblas, --remap and --hold-lock need --fuse\n");
        return 2;
    }
    if (remap) {
        remap_local = open(remap, O_RDONLY);
        remap_fuse = open(fuse, O_RDONLY);
        if (remap_local < 0 || remap_fuse < 0) { perror("open"); return 2; }
    }
    if (openblas) {
        uint8_t *area = mmap(NULL, 3 * 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        int lib = open(openblas, O_RDONLY), stall = open(fuse, O_RDONLY);
        if (lib < 0 || stall < 0) { perror("open"); return 2; }
        if (mmap(area, 4096, PROT_READ, MAP_PRIVATE | MAP_FIXED, lib, 0) == MAP_FAILED
            || mmap(area + 4096, 2 * 4096, PROT_READ, MAP_PRIVATE | MAP_FIXED, stall, 0)
                   == MAP_FAILED) { perror("mmap fixed"); return 2; }
        close(lib);
        close(stall);
        if (remap) remap_base = area + 4096;
    }
    if (remap) {
        if (!remap_base) {
            remap_base = mmap(NULL, 2 * 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (remap_base == MAP_FAILED) { perror("mmap"); return 2; }
        }
        pthread_create(&t, &attr, swapper, NULL);
    }
    if (polars) {
        pthread_create(&t, &attr, spinner, "polars-0");
        pthread_create(&t, &attr, spinner, "polars-1");
    }
    if (churn) churn_base = map_file(churn, &churn_size, PROT_READ | PROT_EXEC);
    printf("ready\n");
    fflush(stdout);
    if (hold) {  /* after "ready": from now on no thread of it can map anything */
        pthread_create(&t, &attr, lock_writer, NULL);
        pthread_create(&t, &attr, self_reader, NULL);
    }
    if (exec_path) {
        char line[16];
        if (fgets(line, sizeof line, stdin)) {
            execl(exec_path, exec_path, (char *)NULL);
            perror("exec");
            return 2;
        }
    }
    uint64_t n = 0;
    for (;;) {
        if (!churn && !remap) { pause(); continue; }
        void *(*body)(void *) = remap ? remap_holder : churner;
        if (churn && remap && n % 2) body = churner;
        if (pthread_create(&t, &attr, body, (void *)(uintptr_t)(++n)) != 0) usleep(1000);
        usleep((useconds_t)(1e6 / rate));
    }
}
"""


def compiler() -> str | None:
    return shutil.which("gcc") or shutil.which("cc")


def build(directory: Path) -> Path | None:
    """Compile the program into `directory` (mode 0755: any user may run it); None without
    a C compiler."""
    cc = compiler()
    if cc is None:
        return None
    source = directory / "hostile_memory.c"
    binary = directory / "hostile_memory"
    source.write_text(SOURCE)
    subprocess.run(
        [cc, "-O0", "-pthread", "-o", str(binary), str(source)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    binary.chmod(0o755)
    return binary
