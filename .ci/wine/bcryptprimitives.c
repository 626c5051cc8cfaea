// A stand-in for bcryptprimitives.dll, which Debian 12's wine (8.0) lacks: Rust's standard
// library takes its random seeds from that DLL's ProcessPrng, so no Rust program starts under
// that wine without it. It fills the buffer from RtlGenRandom (advapi32's SystemFunction036), as
// ProcessPrng does on Windows. Built and put beside the test binaries by .ci/run alone; never
// shipped.
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T length) {
    while (length > 0) {
        ULONG chunk = length > 0x10000000 ? 0x10000000 : (ULONG)length;
        if (!SystemFunction036(data, chunk)) return FALSE;
        data += chunk;
        length -= chunk;
    }
    return TRUE;
}
