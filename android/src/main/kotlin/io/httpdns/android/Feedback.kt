package io.httpdns.android

import okhttp3.Call
import okhttp3.EventListener
import okhttp3.Protocol
import java.io.IOException
import java.net.InetSocketAddress
import java.net.Proxy

/**
 * App feedback for the server's live scores (`POST /feedback`, docs/live-scores.md): every
 * connection OkHttp opens to an address of a name (not an IP literal) is reported as
 * `{"ip", "domain", "ok", "connect_ms", "network"}`, batched with the events' queue rules. The
 * server folds the median over clients into the node's latency for the client's carrier and region.
 * Give it to OkHttp with `builder.eventListenerFactory(httpDns.eventListenerFactory())`.
 */
internal class FeedbackListener(private val sdk: HttpDns) : EventListener() {
    private var started = 0L

    override fun connectStart(call: Call, inetSocketAddress: InetSocketAddress, proxy: Proxy) {
        started = sdk.clock.millis()
    }

    override fun connectEnd(call: Call, inetSocketAddress: InetSocketAddress, proxy: Proxy, protocol: Protocol?) {
        report(call, inetSocketAddress, true)
    }

    override fun connectFailed(call: Call, inetSocketAddress: InetSocketAddress, proxy: Proxy, protocol: Protocol?, ioe: IOException) {
        report(call, inetSocketAddress, false)
    }

    private fun report(call: Call, address: InetSocketAddress, ok: Boolean) {
        val host = call.request().url.host
        if (IpFilter.parse(host) != null || address.isUnresolved) return
        val ip = address.address ?: return
        sdk.recordFeedback(host, IpFilter.text(ip), ok, sdk.clock.millis() - started)
    }
}
