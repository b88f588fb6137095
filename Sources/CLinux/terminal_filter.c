// The seccomp filter `containerfs run` gives bubblewrap (`--seccomp FD`): a program in the
// sandbox may not push input into a terminal (TIOCSTI) nor use the console's TIOCLINUX
// (which can paste a selection back as input), as Flatpak refuses them. Everything else is
// allowed: the sandbox's other walls are namespaces, dropped capabilities and no_new_privs.
#include "CLinux.h"
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/ioctl.h>
#include <unistd.h>

// The ABIs a process of this architecture can make system calls in, each with its number
// of ioctl(2). A 64-bit x86 process can also enter through the i386 and x32 tables.
#if defined(__x86_64__)
#define X32_BIT 0x40000000u
static const struct { uint32_t arch; uint32_t ioctl[3]; } abis[] = {
    {AUDIT_ARCH_X86_64, {16, X32_BIT | 514, X32_BIT | 16}},
    {AUDIT_ARCH_I386, {54, 54, 54}},
};
#elif defined(__aarch64__)
static const struct { uint32_t arch; uint32_t ioctl[3]; } abis[] = {
    {AUDIT_ARCH_AARCH64, {29, 29, 29}},
    {AUDIT_ARCH_ARM, {54, 54, 54}},
};
#else
#define NO_TERMINAL_FILTER 1
#endif

// seccomp_data.args[1], the request, is 64 bits; the kernel takes only its low 32 (an
// unsigned int), so only those are compared (little-endian: the first word).
#define REQUEST_LOW (offsetof(struct seccomp_data, args) + sizeof(uint64_t))

int clinux_write_terminal_filter(int fd) {
#ifdef NO_TERMINAL_FILTER
    errno = ENOSYS;
    return -1;
#else
    enum { ABIS = sizeof abis / sizeof abis[0] };
    // [load arch, one compare per ABI, allow], then per ABI [load nr, 3 compares, allow],
    // then [load request, 2 compares, allow, deny]. A jump counts the instructions it skips.
    struct sock_filter program[ABIS + 2 + 5 * ABIS + 5];
    const unsigned request = ABIS + 2 + 5 * ABIS;
    unsigned count = 0;
    program[count++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
    for (unsigned i = 0; i < ABIS; i++) {
        unsigned block = ABIS + 2 + 5 * i;
        program[count] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, abis[i].arch, (uint8_t)(block - count - 1), 0);
        count++;
    }
    // An ABI this architecture does not have: nothing to refuse.
    program[count++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    for (unsigned i = 0; i < ABIS; i++) {
        program[count++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
        for (unsigned j = 0; j < 3; j++) {
            program[count] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, abis[i].ioctl[j], (uint8_t)(request - count - 1), 0);
            count++;
        }
        program[count++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    }
    program[count++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, REQUEST_LOW);
    program[count++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TIOCSTI, 2, 0);
    program[count++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TIOCLINUX, 1, 0);
    program[count++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    program[count++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM);

    const char *bytes = (const char *)program;
    size_t left = count * sizeof program[0];
    while (left > 0) {
        ssize_t written = write(fd, bytes, left);
        if (written < 0 && errno == EINTR) continue;
        if (written <= 0) return -1;
        bytes += written;
        left -= (size_t)written;
    }
    return 0;
#endif
}
