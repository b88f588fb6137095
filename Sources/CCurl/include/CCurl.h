// libcurl (Debian's libcurl4-openssl-dev), for the object store: HTTP(S) with requests
// signed by curl's own AWS Signature V4 (CURLOPT_AWS_SIGV4). curl_easy_setopt and
// curl_easy_getinfo are variadic, which Swift cannot call: one typed shim per kind of
// argument. Only ContainerObjectStore imports this module.
#ifndef CCURL_H
#define CCURL_H

#include <curl/curl.h>

/// A whole number option (timeouts, flags).
CURLcode ccurl_setopt_long(CURL *handle, CURLoption option, long value);
/// A string option; curl copies it.
CURLcode ccurl_setopt_string(CURL *handle, CURLoption option, const char *value);
/// A pointer option: callback data (CURLOPT_*DATA), or a header list (CURLOPT_HTTPHEADER).
CURLcode ccurl_setopt_pointer(CURL *handle, CURLoption option, void *value);
/// A size option (CURLOPT_INFILESIZE_LARGE, CURLOPT_POSTFIELDSIZE_LARGE).
CURLcode ccurl_setopt_offset(CURL *handle, CURLoption option, curl_off_t value);
/// CURLOPT_WRITEFUNCTION, CURLOPT_READFUNCTION or CURLOPT_HEADERFUNCTION.
CURLcode ccurl_setopt_data_function(CURL *handle, CURLoption option, curl_write_callback function);
/// CURLOPT_XFERINFOFUNCTION (and turns progress calls on).
CURLcode ccurl_setopt_progress_function(CURL *handle, curl_xferinfo_callback function);
/// A whole number of information (CURLINFO_RESPONSE_CODE).
CURLcode ccurl_getinfo_long(CURL *handle, CURLINFO info, long *value);

/// Makes SIGINT and SIGTERM set a flag instead of ending the process, so that an upload
/// can abort its multipart upload before it exits; `ccurl_interruption` reads the flag
/// (the signal's number, or 0); both are unblocked in the calling thread (and the
/// threads it starts later). `ccurl_restore_signals` puts the default actions back.
void ccurl_catch_interruptions(void);
int ccurl_interruption(void);
void ccurl_restore_signals(void);

#endif
