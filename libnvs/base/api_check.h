/* The compile-time checks that cuda/cuda_api_check.c and nvml/nvml_api_check.c make of our own
 * declarations against a vendor's header, whose types each captured at file scope under a
 * prefix of its own (cudah_, nvmlh_) before ours shadow them. Never part of the library. */
#ifndef GS_API_CHECK_H
#define GS_API_CHECK_H

#define GS_SAME_TYPE(a, b, what) _Static_assert(__builtin_types_compatible_p(a, b), what);

/* Our struct T against the captured one, prefix##T: size and alignment. */
#define GS_API_CHECK_STRUCT(prefix, T, header)                                                   \
    _Static_assert(sizeof(T) == sizeof(prefix##T), #T ": size differs from " header);            \
    _Static_assert(_Alignof(T) == _Alignof(prefix##T), #T ": alignment differs from " header);
/* Its field f: offset and size, and (GS_API_CHECK_FIELD) its type too. */
#define GS_API_CHECK_FIELD_LAYOUT(prefix, T, f)                                                  \
    _Static_assert(offsetof(T, f) == offsetof(prefix##T, f), #T "." #f ": offset differs");      \
    _Static_assert(sizeof(((T *)0)->f) == sizeof(((prefix##T *)0)->f), #T "." #f ": size differs");
#define GS_API_CHECK_FIELD(prefix, T, f)                                                         \
    GS_API_CHECK_FIELD_LAYOUT(prefix, T, f)                                                      \
    GS_SAME_TYPE(__typeof__(((T *)0)->f), __typeof__(((prefix##T *)0)->f),                      \
                 #T "." #f ": type differs")

#endif
