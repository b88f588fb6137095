// The seccomp filter `containerfs run` gives bubblewrap (`--seccomp FD`): a program in the
// sandbox may not push input into a terminal (TIOCSTI) nor use the console's TIOCLINUX
// (which can paste a selection back as input), as Flatpak refuses them; and it has no
// kernel keyrings (add_key, request_key and keyctl fail with ENOSYS, as on a kernel built
// without them, as Flatpak and Docker refuse them): the caller's session keyring is
// inherited across exec, and whoever possesses it reads every key in it, whatever their
// uid. Everything else is allowed: the sandbox's other walls are namespaces, dropped
// capabilities and no_new_privs.
#include "CLinux.h"
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/ioctl.h>
#include <unistd.h>

// The ABIs a process of this architecture can make system calls in, each with its numbers
// of ioctl(2) and of add_key, request_key and keyctl (repeated to fill the rows). A 64-bit
// x86 process can also enter through the i386 and x32 tables.
enum { IOCTLS = 3, KEY_CALLS = 6 };
#if defined(__x86_64__)
#define X32_BIT 0x40000000u
static const struct { uint32_t arch; uint32_t ioctl[IOCTLS]; uint32_t keys[KEY_CALLS]; } abis[] = {
    {AUDIT_ARCH_X86_64, {16, X32_BIT | 514, X32_BIT | 16}, {248, 249, 250, X32_BIT | 248, X32_BIT | 249, X32_BIT | 250}},
    {AUDIT_ARCH_I386, {54, 54, 54}, {286, 287, 288, 286, 287, 288}},
};
#elif defined(__aarch64__)
static const struct { uint32_t arch; uint32_t ioctl[IOCTLS]; uint32_t keys[KEY_CALLS]; } abis[] = {
    {AUDIT_ARCH_AARCH64, {29, 29, 29}, {217, 218, 219, 217, 218, 219}},
    {AUDIT_ARCH_ARM, {54, 54, 54}, {309, 310, 311, 309, 310, 311}},
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
    enum { ABIS = sizeof abis / sizeof abis[0], BLOCK = 1 + IOCTLS + KEY_CALLS + 1 };
    // [load arch, one compare per ABI, allow], then per ABI [load nr, the compares, allow],
    // then [load request, 2 compares, allow, deny], then [no keys]. A jump counts the
    // instructions it skips.
    struct sock_filter program[ABIS + 2 + BLOCK * ABIS + 5 + 1];
    const unsigned request = ABIS + 2 + BLOCK * ABIS;
    const unsigned noKeys = request + 5;
    unsigned count = 0;
    program[count++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
    for (unsigned i = 0; i < ABIS; i++) {
        unsigned block = ABIS + 2 + BLOCK * i;
        program[count] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, abis[i].arch, (uint8_t)(block - count - 1), 0);
        count++;
    }
    // An ABI this architecture does not have: nothing to refuse.
    program[count++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    for (unsigned i = 0; i < ABIS; i++) {
        program[count++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
        for (unsigned j = 0; j < IOCTLS; j++) {
            program[count] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, abis[i].ioctl[j], (uint8_t)(request - count - 1), 0);
            count++;
        }
        for (unsigned j = 0; j < KEY_CALLS; j++) {
            program[count] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, abis[i].keys[j], (uint8_t)(noKeys - count - 1), 0);
            count++;
        }
        program[count++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    }
    program[count++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, REQUEST_LOW);
    program[count++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TIOCSTI, 2, 0);
    program[count++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TIOCLINUX, 1, 0);
    program[count++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    program[count++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM);
    program[count++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS);

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
