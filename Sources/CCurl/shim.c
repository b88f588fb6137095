#include "CCurl.h"
#include <pthread.h>
#include <signal.h>
#include <stddef.h>

CURLcode ccurl_setopt_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}

CURLcode ccurl_setopt_string(CURL *handle, CURLoption option, const char *value) {
    return curl_easy_setopt(handle, option, value);
}

CURLcode ccurl_setopt_pointer(CURL *handle, CURLoption option, void *value) {
    return curl_easy_setopt(handle, option, value);
}

CURLcode ccurl_setopt_offset(CURL *handle, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(handle, option, value);
}

CURLcode ccurl_setopt_data_function(CURL *handle, CURLoption option, curl_write_callback function) {
    return curl_easy_setopt(handle, option, function);
}

CURLcode ccurl_setopt_progress_function(CURL *handle, curl_xferinfo_callback function) {
    CURLcode result = curl_easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, function);
    if (result != CURLE_OK) return result;
    return curl_easy_setopt(handle, CURLOPT_NOPROGRESS, 0L);
}

CURLcode ccurl_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    return curl_easy_getinfo(handle, info, value);
}

static volatile sig_atomic_t interruption = 0;

static void note_interruption(int signal) {
    interruption = signal;
}

void ccurl_catch_interruptions(void) {
    struct sigaction action = {0};
    action.sa_handler = note_interruption;
    action.sa_flags = SA_RESTART;  // the reads of a backup go on; the flag is checked often
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, NULL);
    sigaction(SIGTERM, &action, NULL);
    // A parent may have started us with them blocked (Foundation's Process does): they
    // would stay pending, and the upload would not stop.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    pthread_sigmask(SIG_UNBLOCK, &signals, NULL);
}

int ccurl_interruption(void) {
    return interruption;
}

void ccurl_restore_signals(void) {
    struct sigaction action = {0};
    action.sa_handler = SIG_DFL;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, NULL);
    sigaction(SIGTERM, &action, NULL);
}
