/* Stream capture and CUDA graphs.
 *
 * While a stream captures, work submitted to it is recorded into a graph instead of running.
 * The interaction rules follow cuThreadExchangeStreamCaptureMode: a "potentially unsafe" call
 * (context synchronization, cuMemAlloc, cuMemFree, ...) made while a conflicting capture is going
 * on fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates that capture, whose
 * cuStreamEndCapture then fails with CUDA_ERROR_STREAM_CAPTURE_INVALIDATED. So a library that
 * synchronizes inside someone's capture is caught, as on the real driver. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_driver.h"

#define FAKE_GRAPH_MAGIC 0x47524150u
#define FAKE_EXEC_MAGIC 0x47455845u
#define CAPTURE_MAX_STREAMS 16

struct CUgraph_st {
    uint32_t magic;
    size_t n, cap;
    struct fake_op *nodes;
};

struct CUgraphExec_st {
    uint32_t magic;
    size_t n;
    struct fake_op *nodes;
};

struct fake_capture {
    uint64_t id;
    CUstreamCaptureMode mode;
    pthread_t owner;
    bool active;
    bool invalidated;
    struct CUgraph_st *graph;
    bool owns_graph;                 /* false for cuStreamBeginCaptureToGraph */
    struct CUstream_st *streams[CAPTURE_MAX_STREAMS]; /* [0] is where capture began */
    size_t nstreams;
    struct fake_capture *next;       /* list of active captures */
};

/* Guards every capture, stream->capture and event->capture. Captures are never freed: events
 * and streams may still point at an ended one. */
static pthread_mutex_t capture_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fake_capture *active_captures;
static __thread CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

static struct CUgraph_st *graph_new(void)
{
    struct CUgraph_st *g = calloc(1, sizeof *g);
    if (g)
        g->magic = FAKE_GRAPH_MAGIC;
    return g;
}

static bool graph_append(struct CUgraph_st *g, const struct fake_op *ops, size_t n)
{
    if (g->n + n > g->cap) {
        size_t cap = (g->cap ? g->cap * 2 : 8) + n;
        struct fake_op *nodes = realloc(g->nodes, cap * sizeof *nodes);
        if (!nodes)
            return false;
        g->nodes = nodes;
        g->cap = cap;
    }
    memcpy(g->nodes + g->n, ops, n * sizeof *ops);
    g->n += n;
    return true;
}

static void invalidate_locked(struct fake_capture *c, const char *why)
{
    if (!c->invalidated)
        fake_log("capture_invalidated", "capture=%llu by=%s", (unsigned long long)c->id, why);
    c->invalidated = true;
}

CUresult fake_capture_check_unsafe(const char *api)
{
    bool conflict = false;
    pthread_mutex_lock(&capture_lock);
    if (thread_mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        for (struct fake_capture *c = active_captures; c; c = c->next) {
            bool mine = pthread_equal(c->owner, pthread_self());
            if ((mine && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
                (!mine && thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
                 c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
                invalidate_locked(c, api);
                conflict = true;
            }
        }
    pthread_mutex_unlock(&capture_lock);
    if (conflict)
        fake_log("capture_violation", "api=%s result=%d", api,
                 (int)CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    return conflict ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

CUresult fake_capture_record(struct CUstream_st *s, const struct fake_op *ops, size_t n,
                             bool *captured)
{
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&capture_lock);
    struct fake_capture *c = s->capture;
    *captured = c != NULL;
    if (c) {
        if (c->invalidated)
            r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        else if (!graph_append(c->graph, ops, n))
            r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&capture_lock);
    return r;
}

bool fake_capture_blocks_legacy(CUcontext ctx)
{
    bool blocks = false;
    pthread_mutex_lock(&capture_lock);
    for (struct fake_capture *c = active_captures; c && !blocks; c = c->next)
        for (size_t i = 0; i < c->nstreams; i++)
            if (c->streams[i]->ctx == ctx && !(c->streams[i]->flags & CU_STREAM_NON_BLOCKING))
                blocks = true;
    pthread_mutex_unlock(&capture_lock);
    return blocks;
}

bool fake_capture_invalidate_stream(struct CUstream_st *s)
{
    pthread_mutex_lock(&capture_lock);
    struct fake_capture *c = s->capture;
    if (c)
        invalidate_locked(c, "stream_sync_or_query");
    pthread_mutex_unlock(&capture_lock);
    return c != NULL;
}

bool fake_capture_event_record(struct CUevent_st *e, struct CUstream_st *s)
{
    pthread_mutex_lock(&capture_lock);
    e->capture = s->capture;
    bool captured = e->capture != NULL;
    pthread_mutex_unlock(&capture_lock);
    return captured;
}

bool fake_capture_event_captured(struct CUevent_st *e)
{
    pthread_mutex_lock(&capture_lock);
    bool captured = e->capture && e->capture->active;
    pthread_mutex_unlock(&capture_lock);
    return captured;
}

void fake_capture_join(struct CUstream_st *s, struct CUevent_st *e)
{
    pthread_mutex_lock(&capture_lock);
    struct fake_capture *c = e->capture;
    if (c && c->active && !s->capture && c->nstreams < CAPTURE_MAX_STREAMS) {
        c->streams[c->nstreams++] = s;
        s->capture = c;
    }
    pthread_mutex_unlock(&capture_lock);
}

/* ---- begin / end / query ------------------------------------------------------------------- */

static CUresult begin_capture(const struct fake_call *call, CUstream hStream, CUgraph into,
                              CUstreamCaptureMode mode)
{
    struct CUstream_st *s;
    CUresult r = fake_stream_resolve(hStream, call->per_thread, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
        mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    if (into && into->magic != FAKE_GRAPH_MAGIC)
        return CUDA_ERROR_INVALID_VALUE;
    if (s->legacy)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* the legacy stream cannot capture */
    struct fake_capture *c = calloc(1, sizeof *c);
    struct CUgraph_st *g = into ? into : graph_new();
    if (!c || !g) {
        free(c);
        if (!into)
            free(g);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    c->id = fake_next_id();
    c->mode = mode;
    c->owner = pthread_self();
    c->active = true;
    c->graph = g;
    c->owns_graph = !into;
    c->streams[c->nstreams++] = s;
    pthread_mutex_lock(&capture_lock);
    if (s->capture)
        r = CUDA_ERROR_ILLEGAL_STATE;
    else {
        s->capture = c;
        c->next = active_captures;
        active_captures = c;
    }
    pthread_mutex_unlock(&capture_lock);
    if (r != CUDA_SUCCESS) {
        free(c);
        if (!into)
            free(g);
    }
    char name[32];
    fake_log(fake_event_name("capture_begin", call->api, name, sizeof name),
             "api=%s stream=%llu mode=%d capture=%llu result=%d", call->api,
             (unsigned long long)s->id, (int)mode,
             r == CUDA_SUCCESS ? (unsigned long long)c->id : 0ull, (int)r);
    return r;
}

static CUresult cuStreamBeginCapture_v2_impl(const struct fake_call *call, CUstream hStream,
                                             CUstreamCaptureMode mode)
{
    return begin_capture(call, hStream, NULL, mode);
}
FAKE_PTSZ_PAIR(cuStreamBeginCapture_v2, (CUstream hStream, CUstreamCaptureMode mode), hStream,
               mode)

/* The original entry point: global mode. */
static CUresult cuStreamBeginCapture_impl(const struct fake_call *call, CUstream hStream)
{
    return begin_capture(call, hStream, NULL, CU_STREAM_CAPTURE_MODE_GLOBAL);
}
FAKE_PTSZ_PAIR(cuStreamBeginCapture, (CUstream hStream), hStream)

static CUresult cuStreamBeginCaptureToGraph_impl(const struct fake_call *call, CUstream hStream,
                                                 CUgraph hGraph, const CUgraphNode *dependencies,
                                                 const CUgraphEdgeData *dependencyData,
                                                 size_t numDependencies, CUstreamCaptureMode mode)
{
    (void)dependencies; /* nodes run in recorded order; dependencies add nothing to that */
    (void)dependencyData;
    (void)numDependencies;
    if (!hGraph)
        return CUDA_ERROR_INVALID_VALUE;
    return begin_capture(call, hStream, hGraph, mode);
}
FAKE_PTSZ_PAIR(cuStreamBeginCaptureToGraph,
               (CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                const CUgraphEdgeData *dependencyData, size_t numDependencies,
                CUstreamCaptureMode mode),
               hStream, hGraph, dependencies, dependencyData, numDependencies, mode)

static CUresult cuStreamEndCapture_impl(const struct fake_call *call, CUstream hStream,
                                        CUgraph *phGraph)
{
    struct CUstream_st *s;
    CUresult r = fake_stream_resolve(hStream, call->per_thread, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (!phGraph)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&capture_lock);
    struct fake_capture *c = s->capture;
    size_t nodes = 0;
    if (!c)
        r = CUDA_ERROR_ILLEGAL_STATE;
    else if (c->streams[0] != s)
        r = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
    else if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && !pthread_equal(c->owner, pthread_self()))
        r = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    else {
        for (size_t i = 0; i < c->nstreams; i++)
            c->streams[i]->capture = NULL;
        for (struct fake_capture **pp = &active_captures; *pp; pp = &(*pp)->next)
            if (*pp == c) {
                *pp = c->next;
                break;
            }
        c->active = false;
        nodes = c->graph->n;
        if (c->invalidated) {
            r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
            *phGraph = NULL;
            if (c->owns_graph) {
                free(c->graph->nodes);
                c->graph->magic = 0;
            }
        } else
            *phGraph = c->graph;
    }
    pthread_mutex_unlock(&capture_lock);
    char name[32];
    fake_log(fake_event_name("capture_end", call->api, name, sizeof name),
             "api=%s stream=%llu capture=%llu nodes=%zu result=%d", call->api,
             (unsigned long long)s->id, c ? (unsigned long long)c->id : 0ull, nodes, (int)r);
    return r;
}
FAKE_PTSZ_PAIR(cuStreamEndCapture, (CUstream hStream, CUgraph *phGraph), hStream, phGraph)

static CUresult capture_info(const struct fake_call *call, CUstream hStream,
                             CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                             const CUgraphNode **deps, size_t *ndeps)
{
    struct CUstream_st *s;
    FAKE_TRY(fake_stream_resolve(hStream, call->per_thread, &s));
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    if (s->legacy && fake_capture_blocks_legacy(s->ctx))
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    pthread_mutex_lock(&capture_lock);
    struct fake_capture *c = s->capture;
    *status = !c ? CU_STREAM_CAPTURE_STATUS_NONE
                 : c->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                  : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if (id)
        *id = c ? c->id : 0;
    if (graph)
        *graph = c ? c->graph : NULL;
    pthread_mutex_unlock(&capture_lock);
    if (deps)
        *deps = NULL;
    if (ndeps)
        *ndeps = 0;
    return CUDA_SUCCESS;
}

static CUresult cuStreamIsCapturing_impl(const struct fake_call *call, CUstream hStream,
                                         CUstreamCaptureStatus *captureStatus)
{
    return capture_info(call, hStream, captureStatus, NULL, NULL, NULL, NULL);
}
FAKE_PTSZ_PAIR(cuStreamIsCapturing, (CUstream hStream, CUstreamCaptureStatus *captureStatus),
               hStream, captureStatus)

static CUresult cuStreamGetCaptureInfo_impl(const struct fake_call *call, CUstream hStream,
                                            CUstreamCaptureStatus *status, cuuint64_t *id)
{
    return capture_info(call, hStream, status, id, NULL, NULL, NULL);
}
FAKE_PTSZ_PAIR(cuStreamGetCaptureInfo,
               (CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out),
               hStream, captureStatus_out, id_out)

static CUresult cuStreamGetCaptureInfo_v2_impl(const struct fake_call *call, CUstream hStream,
                                               CUstreamCaptureStatus *status, cuuint64_t *id,
                                               CUgraph *graph, const CUgraphNode **deps,
                                               size_t *ndeps)
{
    return capture_info(call, hStream, status, id, graph, deps, ndeps);
}
FAKE_PTSZ_PAIR(cuStreamGetCaptureInfo_v2,
               (CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
                CUgraph *graph_out, const CUgraphNode **dependencies_out,
                size_t *numDependencies_out),
               hStream, captureStatus_out, id_out, graph_out, dependencies_out,
               numDependencies_out)

static CUresult cuStreamGetCaptureInfo_v3_impl(const struct fake_call *call, CUstream hStream,
                                               CUstreamCaptureStatus *status, cuuint64_t *id,
                                               CUgraph *graph, const CUgraphNode **deps,
                                               const CUgraphEdgeData **edges, size_t *ndeps)
{
    if (edges)
        *edges = NULL;
    return capture_info(call, hStream, status, id, graph, deps, ndeps);
}
FAKE_PTSZ_PAIR(cuStreamGetCaptureInfo_v3,
               (CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
                CUgraph *graph_out, const CUgraphNode **dependencies_out,
                const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out),
               hStream, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out,
               numDependencies_out)

FAKE_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    FAKE_TRY(fake_check_init());
    if (!mode || (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL &&
                  *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
                  *mode != CU_STREAM_CAPTURE_MODE_RELAXED))
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = thread_mode;
    thread_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

/* ---- graphs -------------------------------------------------------------------------------- */

FAKE_API CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    FAKE_TRY(fake_check_init());
    if (!phGraph || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    return (*phGraph = graph_new()) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

FAKE_API CUresult cuGraphDestroy(CUgraph hGraph)
{
    FAKE_TRY(fake_check_init());
    if (!hGraph || hGraph->magic != FAKE_GRAPH_MAGIC)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&capture_lock);
    hGraph->magic = 0;
    free(hGraph->nodes);
    hGraph->nodes = NULL;
    hGraph->n = hGraph->cap = 0;
    pthread_mutex_unlock(&capture_lock);
    return CUDA_SUCCESS; /* the struct stays so stale handles stay detectable */
}

/* Node handles are addresses of the graph's nodes: valid until the graph changes. */
FAKE_API CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
    FAKE_TRY(fake_check_init());
    if (!hGraph || hGraph->magic != FAKE_GRAPH_MAGIC || !numNodes)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&capture_lock);
    if (nodes) {
        size_t n = *numNodes < hGraph->n ? *numNodes : hGraph->n;
        for (size_t i = 0; i < n; i++)
            nodes[i] = (CUgraphNode)(void *)&hGraph->nodes[i];
        for (size_t i = n; i < *numNodes; i++)
            nodes[i] = NULL;
        *numNodes = n;
    } else
        *numNodes = hGraph->n;
    pthread_mutex_unlock(&capture_lock);
    return CUDA_SUCCESS;
}

static CUresult instantiate(CUgraphExec *phGraphExec, CUgraph hGraph, const char *api)
{
    FAKE_TRY(fake_check_init());
    if (!phGraphExec || !hGraph || hGraph->magic != FAKE_GRAPH_MAGIC)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUgraphExec_st *x = calloc(1, sizeof *x);
    if (!x)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&capture_lock);
    x->n = hGraph->n;
    x->nodes = malloc((x->n ? x->n : 1) * sizeof *x->nodes);
    if (x->nodes)
        memcpy(x->nodes, hGraph->nodes, x->n * sizeof *x->nodes);
    pthread_mutex_unlock(&capture_lock);
    if (!x->nodes) {
        free(x);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    x->magic = FAKE_EXEC_MAGIC;
    *phGraphExec = x;
    fake_log("graph_instantiate", "api=%s nodes=%zu", api, x->n);
    return CUDA_SUCCESS;
}

FAKE_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                              unsigned long long flags)
{
    (void)flags;
    return instantiate(phGraphExec, hGraph, "cuGraphInstantiateWithFlags");
}

/* The CUDA 10-11 signature, still exported. */
FAKE_API CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph,
                                        CUgraphNode *phErrorNode, char *logBuffer,
                                        size_t bufferSize)
{
    if (phErrorNode)
        *phErrorNode = NULL;
    if (logBuffer && bufferSize)
        logBuffer[0] = '\0';
    return instantiate(phGraphExec, hGraph, "cuGraphInstantiate_v2");
}

FAKE_API CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph,
                                     CUgraphNode *phErrorNode, char *logBuffer, size_t bufferSize)
{
    return cuGraphInstantiate_v2(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

static CUresult cuGraphInstantiateWithParams_impl(const struct fake_call *call,
                                                  CUgraphExec *phGraphExec, CUgraph hGraph,
                                                  CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    if (!params)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = instantiate(phGraphExec, hGraph, call->api);
    params->hErrNode_out = NULL;
    params->result_out = r == CUDA_SUCCESS ? 0 : 1;
    return r;
}
FAKE_PTSZ_PAIR(cuGraphInstantiateWithParams,
               (CUgraphExec *phGraphExec, CUgraph hGraph,
                CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams),
               phGraphExec, hGraph, instantiateParams)

FAKE_API CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    FAKE_TRY(fake_check_init());
    if (!hGraphExec || hGraphExec->magic != FAKE_EXEC_MAGIC)
        return CUDA_ERROR_INVALID_VALUE;
    /* Queued copies of its nodes are independent of it, so it can go at once. */
    hGraphExec->magic = 0;
    free(hGraphExec->nodes);
    hGraphExec->nodes = NULL;
    return CUDA_SUCCESS;
}

static CUresult cuGraphLaunch_impl(const struct fake_call *call, CUgraphExec hGraphExec,
                                   CUstream hStream)
{
    struct CUstream_st *s;
    FAKE_TRY(fake_stream_resolve(hStream, call->per_thread, &s));
    if (!hGraphExec || hGraphExec->magic != FAKE_EXEC_MAGIC)
        return CUDA_ERROR_INVALID_VALUE;
    char details[48];
    snprintf(details, sizeof details, "nodes=%zu", hGraphExec->n);
    return fake_submit_ops(call, "graph_launch", s, hGraphExec->nodes, hGraphExec->n, details,
                           NULL);
}
FAKE_PTSZ_PAIR(cuGraphLaunch, (CUgraphExec hGraphExec, CUstream hStream), hGraphExec, hStream)

static CUresult cuGraphUpload_impl(const struct fake_call *call, CUgraphExec hGraphExec,
                                   CUstream hStream)
{
    struct CUstream_st *s;
    FAKE_TRY(fake_stream_resolve(hStream, call->per_thread, &s));
    if (!hGraphExec || hGraphExec->magic != FAKE_EXEC_MAGIC)
        return CUDA_ERROR_INVALID_VALUE;
    struct fake_op op = {.kind = FAKE_OP_NOP, .what = "graph_upload"};
    return fake_submit(call, "graph_upload", s, &op, NULL);
}
FAKE_PTSZ_PAIR(cuGraphUpload, (CUgraphExec hGraphExec, CUstream hStream), hGraphExec, hStream)
