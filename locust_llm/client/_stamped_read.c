/* The kernel transport's two per-token steps in C (locust_llm.client.stamped_read is the
 * Python side, with the same functions in Python where this module is not built):
 *
 * - recv_stamped(sock): one recvmsg of up to 64 KiB on a non-blocking socket, its
 *   SO_TIMESTAMPNS stamp and TCP_INQ queue length read out of the ancillary data, and
 *   CLOCK_REALTIME after the read: (bytes, stamp_ns or 0, drained, now_ns); None when the
 *   socket held nothing (EAGAIN); OSError as Python's socket raises it otherwise.
 * - split_tokens(data, head, tail, limit): how many whole HTTP chunks `data` holds when each
 *   is one SSE token event made of `head`, a non-empty middle without a quote, and `tail`
 *   (sse.text_split's parts); 0 when any chunk is anything else (the caller then reads the
 *   bytes the long way).
 *
 * Python's socket.recvmsg allocates a 64 KiB bytes object per read and shrinks it, and builds a
 * list of tuples for the ancillary data; at one read per token that was a third of a token's
 * CPU (bench/results/cpu_per_token.md). The GIL is held throughout (the socket never blocks),
 * so the one static read buffer is never used by two calls at once.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#ifndef SO_TIMESTAMPNS
#define SO_TIMESTAMPNS 35
#endif
#ifndef TCP_INQ
#define TCP_INQ 36
#endif

#define RECV_BYTES 65536
/* the hex size line of a chunk is found within this many bytes (kernel_transport's 18) */
#define SIZE_LINE_WINDOW 18

static char read_buffer[RECV_BYTES];

static PyObject *fileno_name; /* "fileno", interned */

static PyObject *
recv_stamped(PyObject *Py_UNUSED(module), PyObject *sock)
{
    /* the descriptor asked of the socket at each read: a closed socket says -1 (EBADF, as
       its own recvmsg raises), never a number that another socket has reused since */
    PyObject *number = PyObject_CallMethodNoArgs(sock, fileno_name);
    if (number == NULL)
        return NULL;
    long fd = PyLong_AsLong(number);
    Py_DECREF(number);
    if (fd == -1 && PyErr_Occurred())
        return NULL;
    if (fd < 0) {
        errno = EBADF;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    union {
        char bytes[CMSG_SPACE(sizeof(struct timespec)) + CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } control;
    struct iovec iov = {read_buffer, RECV_BYTES};
    struct msghdr msg;
    ssize_t got;
    for (;;) {
        memset(&msg, 0, sizeof(msg));
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.bytes;
        msg.msg_controllen = sizeof(control.bytes);
        got = recvmsg((int)fd, &msg, 0);
        if (got >= 0)
            break;
        if (errno == EINTR) { /* PEP 475: run the signal handlers, then read again */
            if (PyErr_CheckSignals())
                return NULL;
            continue;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            Py_RETURN_NONE;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    long long stamp_ns = 0;
    int drained = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_TIMESTAMPNS
            && c->cmsg_len >= CMSG_LEN(sizeof(struct timespec))) {
            struct timespec stamp;
            memcpy(&stamp, CMSG_DATA(c), sizeof(stamp));
            stamp_ns = (long long)stamp.tv_sec * 1000000000LL + stamp.tv_nsec;
        } else if (c->cmsg_level == IPPROTO_TCP && c->cmsg_type == TCP_INQ
                   && c->cmsg_len >= CMSG_LEN(sizeof(int))) {
            int queued;
            memcpy(&queued, CMSG_DATA(c), sizeof(queued));
            drained = queued == 0;
        }
    }
    /* the bytes out of the shared buffer first: anything allocated after this may run a
       collection, and a finalizer could read another socket into the buffer */
    PyObject *data = PyBytes_FromStringAndSize(read_buffer, got);
    if (data == NULL)
        return NULL;
    long long now_ns = (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
    return Py_BuildValue("(NLNL)", data, stamp_ns, PyBool_FromLong(drained), now_ns);
}

static int
hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* the index of the first "\r\n" that lies whole within [from, to), or -1 */
static Py_ssize_t
find_crlf(const char *data, Py_ssize_t from, Py_ssize_t to)
{
    for (Py_ssize_t i = from; i + 1 < to; i++)
        if (data[i] == '\r' && data[i + 1] == '\n')
            return i;
    return -1;
}

static PyObject *
split_tokens(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "split_tokens(data, head, tail, limit)");
        return NULL;
    }
    if (!PyBytes_Check(args[0]) || !PyBytes_Check(args[1]) || !PyBytes_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "split_tokens: data, head and tail are bytes");
        return NULL;
    }
    int overflow = 0;
    long long limit = PyLong_AsLongLongAndOverflow(args[3], &overflow);
    if (limit == -1 && PyErr_Occurred())
        return NULL;
    if (overflow > 0) /* past any size a read can hold: no chunk is over it */
        limit = LLONG_MAX;
    else if (overflow < 0)
        limit = LLONG_MIN;
    const char *data = PyBytes_AS_STRING(args[0]);
    const char *head = PyBytes_AS_STRING(args[1]);
    const char *tail = PyBytes_AS_STRING(args[2]);
    Py_ssize_t end = PyBytes_GET_SIZE(args[0]);
    Py_ssize_t head_len = PyBytes_GET_SIZE(args[1]);
    Py_ssize_t tail_len = PyBytes_GET_SIZE(args[2]);
    Py_ssize_t pos = 0;
    long tokens = 0;
    while (pos < end) {
        Py_ssize_t window = pos + SIZE_LINE_WINDOW < end ? pos + SIZE_LINE_WINDOW : end;
        Py_ssize_t size_end = find_crlf(data, pos, window);
        if (size_end <= pos)
            return PyLong_FromLong(0);
        long long size = 0;
        for (Py_ssize_t i = pos; i < size_end; i++) { /* plain hex digits only; else the
                                                          caller's int(..., 16) decides */
            int digit = hex_value(data[i]);
            if (digit < 0 || size - 1 > limit || size > (LLONG_MAX - 15) / 16)
                return PyLong_FromLong(0);
            size = size * 16 + digit;
        }
        Py_ssize_t start = size_end + 2;
        if (size - 1 > limit || size > end - start)
            return PyLong_FromLong(0);
        Py_ssize_t stop = start + (Py_ssize_t)size;
        /* the chunk ends in "\r\n"; its event is "data:...\n\n" with no other newline */
        if (stop + 2 > end || data[stop] != '\r' || data[stop + 1] != '\n')
            return PyLong_FromLong(0);
        if (size < 5 || memcmp(data + start, "data:", 5) != 0)
            return PyLong_FromLong(0);
        if (size < 2 || data[stop - 2] != '\n' || data[stop - 1] != '\n')
            return PyLong_FromLong(0);
        if (memchr(data + start, '\n', (size_t)(stop - 2 - start)) != NULL)
            return PyLong_FromLong(0);
        /* the event (without its blank line) is head + middle + tail */
        Py_ssize_t opened = start + head_len, closed = stop - 2 - tail_len;
        if (opened >= closed || memcmp(data + start, head, (size_t)head_len) != 0
            || memcmp(data + closed, tail, (size_t)tail_len) != 0
            || memchr(data + opened, '"', (size_t)(closed - opened)) != NULL)
            return PyLong_FromLong(0);
        tokens++;
        pos = stop + 2;
    }
    return PyLong_FromLong(tokens);
}

static PyMethodDef methods[] = {
    {"recv_stamped", recv_stamped, METH_O,
     "recv_stamped(sock) -> (bytes, stamp_ns, drained, now_ns), or None when nothing was queued"},
    {"split_tokens", (PyCFunction)(void (*)(void))split_tokens, METH_FASTCALL,
     "split_tokens(data, head, tail, limit) -> the count of split-fitting token chunks, or 0"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_stamped_read",
    "The kernel transport's read and its token check, in C (see stamped_read).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__stamped_read(void)
{
    fileno_name = PyUnicode_InternFromString("fileno");
    if (fileno_name == NULL)
        return NULL;
    return PyModule_Create(&module);
}
