package io.httpdns.android

import okhttp3.HttpUrl
import okhttp3.Interceptor
import okhttp3.Request
import okhttp3.Response
import java.io.IOException
import java.io.InterruptedIOException
import java.net.ConnectException
import java.net.InetSocketAddress
import java.net.NoRouteToHostException
import java.net.Socket
import java.net.UnknownHostException
import java.util.concurrent.Callable
import java.util.concurrent.ExecutorCompletionService
import java.util.concurrent.ExecutorService
import java.util.concurrent.TimeUnit

/**
 * "Is the device's network working?" (seed `000` §3.3), as `httpdns_client::netcheck`: a TCP
 * handshake with port 53 of one `publicIpList` address within the timeout; a refusal does not
 * count; an empty list means yes. Remembered for 2 s.
 */
internal class NetworkCheck(private val port: Int, private val timeoutMs: Int, private val rememberMs: Long, private val clock: Clock, private val executor: ExecutorService) {
    private var last: Triple<Long, List<String>, Boolean>? = null

    fun networkWorks(publicIps: List<String>): Boolean {
        if (publicIps.isEmpty()) return true
        synchronized(this) {
            last?.let { (at, ips, ok) -> if (clock.millis() - at < rememberMs && ips == publicIps) return ok }
        }
        val cs = ExecutorCompletionService<Boolean>(executor)
        val futures = publicIps.map { ip ->
            cs.submit(Callable {
                val addr = IpFilter.parse(ip) ?: return@Callable false
                try {
                    Socket().use { it.connect(InetSocketAddress(addr, port), timeoutMs) }
                    true
                } catch (e: IOException) {
                    false
                }
            })
        }
        var ok = false
        val deadline = clock.millis() + timeoutMs + 500
        for (i in publicIps.indices) {
            val f = cs.poll(Math.max(1, deadline - clock.millis()), TimeUnit.MILLISECONDS) ?: break
            if (try { f.get() } catch (e: Exception) { false }) { ok = true; break }
        }
        futures.forEach { it.cancel(true) }
        synchronized(this) { last = Triple(clock.millis(), publicIps, ok) }
        return ok
    }
}

/**
 * The seed's `MergeHostInterceptor` (§2.2) with the Rust client's failover (`CdnClient::get`):
 * a URL under `mergeHostConfigs` (inside `rate` and `convergenceRate`, the config center's buckets)
 * or already on a `hostListConfig` host goes to the first enabled unified host; on a 5xx, or a
 * connection failure while the network works, the host's failure is counted (possibly disabling
 * it) and the request moves to the next host, then to the original URL. A name that does not
 * resolve moves on without counting. A body is replayed only when safe: idempotent methods with a
 * body that is not one-shot, or any request whose body never went out (connect failures), unless
 * the app opted in with `replayNonIdempotent`.
 */
internal class MergeHostInterceptor(private val sdk: HttpDns) : Interceptor {
    private class Attempt(val url: HttpUrl, val startedAfter: Long) {
        var status: Int = 0
        var failure: String? = null
        var dnsFailed = false
        var timedOut = false
    }

    override fun intercept(chain: Interceptor.Chain): Response {
        val request = chain.request()
        val started = sdk.clock.millis()
        val generation = sdk.networkGeneration
        try {
            return route(chain, request, started)
        } finally {
            // A call that spanned a network change leaves its connection idle now: evict it too.
            if (generation != sdk.networkGeneration) sdk.evictConnections()
        }
    }

    private fun route(chain: Interceptor.Chain, request: Request, started: Long): Response {
        val cfg = sdk.syncHosts()
        val conv = cfg?.let { Convergence.converge(it.doc, sdk.deviceId, request.url) }
        val attempts = ArrayList<Attempt>()
        if (conv == null) return finish(attempts, attempt(chain, request, request.url, started, attempts), started)
        val publicIps = cfg.doc.publicIpList
        val idempotent = request.method in IDEMPOTENT
        val body = request.body
        val replayable = body == null || (!body.isOneShot() && (idempotent || sdk.replayNonIdempotent))
        for (host in sdk.hostPool.candidates()) {
            val target = conv.onHost(host) ?: continue
            if (chain.call().isCanceled()) throw IOException("Canceled")
            try {
                val resp = attempt(chain, request, target, started, attempts)
                if (resp.code < 500) {
                    sdk.hostPool.reportSuccess(host)
                    return finish(attempts, resp, started)
                }
                failed(host, target)
                // The body went out: only a replayable request moves on.
                if (!replayable) return finish(attempts, resp, started)
                resp.close()
            } catch (e: IOException) {
                if (chain.call().isCanceled()) throw e
                val unsent = e is UnknownHostException || e is ConnectException || e is NoRouteToHostException
                if (e !is UnknownHostException) {
                    if (sdk.netCheck.networkWorks(publicIps)) failed(host, target)
                    else attempts.lastOrNull()?.let { it.failure += " (network check failed: host kept)" }
                }
                if (!replayable && !unsent) {
                    report(attempts, null, started)
                    throw e
                }
            }
        }
        val original = try {
            attempt(chain, request, conv.original, started, attempts)
        } catch (e: IOException) {
            report(attempts, null, started)
            throw e
        }
        return finish(attempts, original, started)
    }

    private fun failed(host: String, target: HttpUrl) {
        sdk.hostPool.reportFailure(host, target.toString(), sdk.clock.millis(), sdk.reviveIntervalMs())
    }

    private fun attempt(chain: Interceptor.Chain, request: Request, url: HttpUrl, started: Long, attempts: MutableList<Attempt>): Response {
        val a = Attempt(url, sdk.clock.millis() - started)
        attempts.add(a)
        val req = if (url == request.url) request else request.newBuilder().url(url).build()
        try {
            val resp = chain.proceed(req)
            a.status = resp.code
            return resp
        } catch (e: IOException) {
            a.failure = e.toString()
            a.dnsFailed = e is UnknownHostException
            a.timedOut = e is InterruptedIOException
            throw e
        }
    }

    private fun finish(attempts: List<Attempt>, resp: Response, started: Long): Response {
        report(attempts, resp, started)
        return resp
    }

    /** Host switches, and the request itself when sampled (as `CdnClient::report`). */
    private fun report(attempts: List<Attempt>, resp: Response?, started: Long) {
        val r = sdk.reporter ?: return
        for (i in 0 until attempts.size - 1) {
            val a = attempts[i]
            val b = attempts[i + 1]
            val reason = when {
                a.status >= 500 -> "5xx"
                a.status > 0 -> continue
                a.dnsFailed -> continue
                a.timedOut -> "timeout"
                else -> "connect_error"
            }
            r.record(Events.hostSwitch(Convergence.authority(a.url), Convergence.authority(b.url), reason, b.startedAfter - a.startedAfter))
        }
        val last = attempts.lastOrNull() ?: return
        if (!Events.sampled(r.requestSampleRate)) return
        val outcome = when {
            resp != null && resp.code >= 500 -> "5xx"
            resp != null && resp.code >= 400 -> "4xx"
            resp != null -> "ok"
            last.dnsFailed -> "dns_error"
            last.timedOut -> "timeout"
            else -> "connect_error"
        }
        r.record(Events.request(Convergence.authority(last.url), outcome, sdk.clock.millis() - started, r.requestSampleRate))
    }

    companion object {
        private val IDEMPOTENT = setOf("GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE")
    }
}
