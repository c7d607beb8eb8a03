// SDRT_API: what the shared library libsdrt.so exports (docs/ARCHITECTURE.md, "Installing
// and embedding"). sdrt compiles with hidden visibility by default; every public header opens
// its namespace as `namespace sdrt SDRT_API {`, which gives the classes and functions declared
// there default visibility. Blocks of `namespace sdrt::internal` are not annotated and stay
// hidden; third_party/cmake/libsdrt.map then lets through only sdrt:: C++ symbols and the C
// API's sdrt_* functions. In a static library the attribute changes nothing a caller sees.
// Lives in base/, below every layer (no include of tensor/, cuda/ or comm/ runs up into
// core/); installed as sdrt/export.h.
#ifndef SDRT_EXPORT_H_
#define SDRT_EXPORT_H_

#if defined(__GNUC__) || defined(__clang__)
#define SDRT_API __attribute__((visibility("default")))
#define SDRT_HIDDEN __attribute__((visibility("hidden")))
#else
#define SDRT_API
#define SDRT_HIDDEN
#endif

#endif  // SDRT_EXPORT_H_
