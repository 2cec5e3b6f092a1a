# A static i386 program without libc for tests/unit/seccomp_filter_test.cpp:
# makes each system call below through int 0x80 (the i386 ABI, which the
# filter covers apart from x86-64's) and writes each raw result (the value,
# or -errno) to stdout as a 4-byte little-endian integer, in this order:
#   getpid()                        allowed: a pid
#   io_uring_setup(1, NULL)         not in Docker's profile: -EPERM
#   unshare(CLONE_NEWUSER)          namespaces: -EPERM
#   open_tree_attr(-1, NULL, 0, NULL, 0)   number 467, past the table: -ENOSYS
#   syscall 1000                    past the table: -ENOSYS
#   statmount(NULL, NULL, 0, 0)     allowed by number (newer than libseccomp): -EFAULT
# Built with binutils alone: as --32, ld -m elf_i386.
        .section .text
        .globl _start
_start:
        lea     results, %edi

        mov     $20, %eax               # getpid
        int     $0x80
        mov     %eax, 0(%edi)

        mov     $425, %eax              # io_uring_setup
        mov     $1, %ebx
        xor     %ecx, %ecx
        int     $0x80
        mov     %eax, 4(%edi)

        mov     $310, %eax              # unshare
        mov     $0x10000000, %ebx       # CLONE_NEWUSER
        int     $0x80
        mov     %eax, 8(%edi)

        mov     $467, %eax              # open_tree_attr
        mov     $-1, %ebx
        xor     %ecx, %ecx
        xor     %edx, %edx
        xor     %esi, %esi
        push    %edi
        xor     %edi, %edi
        int     $0x80
        pop     %edi
        mov     %eax, 12(%edi)

        mov     $1000, %eax             # no such call
        int     $0x80
        mov     %eax, 16(%edi)

        mov     $457, %eax              # statmount
        xor     %ebx, %ebx
        xor     %ecx, %ecx
        xor     %edx, %edx
        xor     %esi, %esi
        int     $0x80
        mov     %eax, 20(%edi)

        mov     $4, %eax                # write(1, results, 24)
        mov     $1, %ebx
        lea     results, %ecx
        mov     $24, %edx
        int     $0x80

        mov     $1, %eax                # exit(0)
        xor     %ebx, %ebx
        int     $0x80

        .section .bss
        .align  4
results:
        .skip   24
