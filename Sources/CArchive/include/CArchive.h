// libarchive (Debian's libarchive-dev), for backup archives: pax tar written and read
// through descriptors. Swift calls libarchive directly; the shims below exist only
// where it cannot.
#ifndef CARCHIVE_H
#define CARCHIVE_H

#include <archive.h>
#include <archive_entry.h>
#include <stddef.h>
#include <sys/types.h>

/// Makes libarchive treat names as UTF-8, once per process. In the C locale it would
/// take every non-ASCII byte for an unconvertible character: names would be mangled on
/// reading and every non-ASCII name written with `hdrcharset=BINARY`. With C.UTF-8,
/// valid UTF-8 names are written as standard pax UTF-8 and only the others as raw bytes
/// (`hdrcharset=BINARY`); both read back as the exact bytes.
void carchive_use_utf8_names(void);

#endif
