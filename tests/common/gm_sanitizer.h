/*
 * Which sanitizer a test is built under, for tests whose behaviour depends
 * on it (header only: tests that do not link the test helpers use it too).
 *   GM_TEST_TSAN       ThreadSanitizer
 *   GM_TEST_ASAN       AddressSanitizer
 *   GM_TEST_SANITIZER  any sanitizer with its own allocator and shadow
 *                      memory (address, thread, memory, hwaddress)
 */
#ifndef GM_TEST_SANITIZER_H
#define GM_TEST_SANITIZER_H

#if defined(__SANITIZE_THREAD__)
#define GM_TEST_TSAN 1
#endif
#if defined(__SANITIZE_ADDRESS__)
#define GM_TEST_ASAN 1
#endif
#if defined(__has_feature)
#if __has_feature(thread_sanitizer) && !defined(GM_TEST_TSAN)
#define GM_TEST_TSAN 1
#endif
#if __has_feature(address_sanitizer) && !defined(GM_TEST_ASAN)
#define GM_TEST_ASAN 1
#endif
#if __has_feature(memory_sanitizer) || __has_feature(hwaddress_sanitizer)
#define GM_TEST_OTHER_SANITIZER 1
#endif
#endif
#if defined(GM_TEST_TSAN) || defined(GM_TEST_ASAN) || defined(GM_TEST_OTHER_SANITIZER)
#define GM_TEST_SANITIZER 1
#endif

#endif /* GM_TEST_SANITIZER_H */
