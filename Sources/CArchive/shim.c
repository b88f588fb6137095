#include "CArchive.h"
#include <locale.h>
#include <pthread.h>

static void use_utf8_names(void) {
    // Only LC_CTYPE: libarchive asks nl_langinfo(CODESET) which charset names are in.
    setlocale(LC_CTYPE, "C.UTF-8");
}

void carchive_use_utf8_names(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, use_utf8_names);
}
