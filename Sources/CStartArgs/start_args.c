// The command line for Swift's `CommandLine.arguments`, taken from what glibc hands every ELF constructor.
//
// The Swift runtime (stdlib/public/CommandLineSupport/CommandLine.cpp, Linux) finds argv in a static constructor
// of its own: it reads /proc/self/maps line by line with sscanf to find the stack, then walks back from
// `environ`. In a statically linked tokenbridge that was 8% of a PIV PIN change's instructions (111K of 1.32M,
// callgrind) plus the kernel's rendering of the maps file, in every command. Its only caller in the standard
// library is `_swift_stdlib_getUnsafeArgvArgc`; defining that symbol here means the linker never takes the
// runtime's CommandLine.cpp.o from libswiftCore.a, and its constructor is not in the binary at all.
//
// glibc calls each DT_INIT_ARRAY function of the program with (argc, argv, envp) (csu/libc-start.c, call_init),
// before main; `CommandLine` is first read in main. With the Swift runtime as a shared library (debug builds) the
// runtime's own definition serves its callers and this one is unused.

static int start_argc;
static char **start_argv;

__attribute__((constructor)) static void capture(int argc, char **argv, char **envp) {
  (void)envp;
  start_argc = argc;
  start_argv = argv;
}

// SWIFT_CC(swift) in the runtime's declaration; with one pointer argument and a pointer result it passes both as
// the C convention does, and swiftcall says so to the compiler.
__attribute__((swiftcall)) char **_swift_stdlib_getUnsafeArgvArgc(int *outArgLen) {
  *outArgLen = start_argc;
  return start_argv;
}
