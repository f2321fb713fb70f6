package io.httpdns.android

import io.httpdns.android.TestKit.Server
import okhttp3.Call
import okhttp3.Callback
import okhttp3.Dns
import okhttp3.OkHttpClient
import okhttp3.Request
import okhttp3.Response
import okhttp3.mockwebserver.MockResponse
import okio.Buffer
import org.junit.jupiter.api.Test
import java.io.IOException
import java.io.InputStream
import java.io.OutputStream
import java.net.InetAddress
import java.net.InetSocketAddress
import java.net.ServerSocket
import java.net.Socket
import java.util.Collections
import java.util.Random
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.CountDownLatch
import java.util.concurrent.TimeUnit

/**
 * Seed 000 §5's table, reproduced on loopback (a benchmark, not a timed test: it prints).
 *
 * An app loads a page of [IMAGES] images spread over [DOMAINS] image domains, all requests at once
 * through OkHttp, with cold caches (a fresh client per page). Every host sits behind a TCP proxy
 * that adds [CONNECT_MS] to each connection (a mobile network's handshake); the CDN answers 503
 * to [NODE_FAIL] of requests (a failing node).
 *
 * (a) before convergence: the app's LocalDNS stand-in answers each domain after 20-60 ms, [SLOW]
 *     of answers after 800 ms, and [HIJACK] of answers with an address nothing listens on
 *     (a hijacked answer); a connection pool per domain.
 * (b) with the SDK: HTTPDNS (the service answers after 15 ms), every domain converged onto one
 *     unified host (one pool), a second host to fail over to, LocalDNS only as the fallback.
 */
class PageLoadBenchmarkIT {
    companion object {
        const val IMAGES = 24
        const val DOMAINS = 4
        const val PAGES = 40
        const val CONNECT_MS = 40L
        const val NODE_FAIL = 0.02
        const val SLOW = 0.05
        const val HIJACK = 0.03
    }

    /** Adds `delayMs` before each connection reaches `target`, as a long round trip would. */
    class DelayProxy(private val target: Int, private val delayMs: Long) : AutoCloseable {
        private val server = ServerSocket(0, 200, InetAddress.getByName("127.0.0.1"))
        private val sockets = Collections.synchronizedList(ArrayList<Socket>())
        val port: Int get() = server.localPort

        init {
            Thread {
                while (!server.isClosed) {
                    val client = try { server.accept() } catch (e: IOException) { break }
                    sockets.add(client)
                    Thread {
                        try {
                            Thread.sleep(delayMs)
                            val up = Socket()
                            up.connect(InetSocketAddress("127.0.0.1", target))
                            sockets.add(up)
                            pump(client.getInputStream(), up.getOutputStream(), up)
                            pump(up.getInputStream(), client.getOutputStream(), client)
                        } catch (e: Exception) {
                            client.close()
                        }
                    }.apply { isDaemon = true }.start()
                }
            }.apply { isDaemon = true }.start()
        }

        private fun pump(from: InputStream, to: OutputStream, close: Socket) {
            Thread {
                val buf = ByteArray(16 * 1024)
                try {
                    while (true) {
                        val n = from.read(buf)
                        if (n < 0) break
                        to.write(buf, 0, n)
                        to.flush()
                    }
                } catch (e: IOException) {
                } finally {
                    try { close.shutdownOutput() } catch (e: IOException) {}
                }
            }.apply { isDaemon = true }.start()
        }

        override fun close() {
            server.close()
            synchronized(sockets) { sockets.forEach { try { it.close() } catch (e: IOException) {} } }
        }
    }

    /** The carrier's LocalDNS as the app sees it: delays, slow answers, hijacked answers; cached per page. */
    class LocalDnsStandIn(seed: Long) : Dns {
        private val random = Random(seed)
        private val cache = ConcurrentHashMap<String, List<InetAddress>>()
        override fun lookup(hostname: String): List<InetAddress> = cache.getOrPut(hostname) {
            val (delay, hijack) = synchronized(random) {
                val r = random.nextDouble()
                (if (r < SLOW) 800L else 20L + random.nextInt(41)) to (random.nextDouble() < HIJACK)
            }
            Thread.sleep(delay)
            listOf(InetAddress.getByName(if (hijack) "127.0.0.2" else "127.0.0.1"))
        }
    }

    class Figures(val name: String) {
        val times = Collections.synchronizedList(ArrayList<Long>())
        var failures = 0
        var requests = 0
        fun mean() = times.sum().toDouble() / Math.max(1, times.size)
        fun p90() = times.sorted().let { it[Math.min(it.size - 1, (it.size * 0.9).toInt())] }
        fun failRate() = 100.0 * failures / Math.max(1, requests)
    }

    private fun loadPage(client: OkHttpClient, urls: List<String>, f: Figures) {
        val done = CountDownLatch(urls.size)
        for (u in urls) {
            val t0 = System.nanoTime()
            client.newCall(Request.Builder().url(u).build()).enqueue(object : Callback {
                override fun onFailure(call: Call, e: IOException) = finish(false)
                override fun onResponse(call: Call, response: Response) {
                    val ok = response.use { it.isSuccessful && it.body!!.bytes().isNotEmpty() }
                    finish(ok)
                }
                fun finish(ok: Boolean) {
                    synchronized(f) {
                        f.requests++
                        if (!ok) f.failures++
                    }
                    f.times.add((System.nanoTime() - t0) / 1_000_000)
                    done.countDown()
                }
            })
        }
        check(done.await(60, TimeUnit.SECONDS))
    }

    @Test
    fun pageLoadBeforeAndWithTheSdk() {
        val image = Buffer().write(ByteArray(20 * 1024) { it.toByte() })
        val nodeRandom = Random(7)
        val cdn = Server {
            val fail = synchronized(nodeRandom) { nodeRandom.nextDouble() < NODE_FAIL }
            if (fail) MockResponse().setResponseCode(503) else MockResponse().setBody(image.clone()).setHeadersDelay(5, TimeUnit.MILLISECONDS)
        }
        val service = Server { r ->
            TestKit.json(TestKit.answer(r.requestUrl!!.queryParameter("host")!!.split(',')[0], "127.0.0.1", ttl = 300))
                .setHeadersDelay(15, TimeUnit.MILLISECONDS)
        }
        val domainProxies = (0 until DOMAINS).map { DelayProxy(cdn.port, CONNECT_MS) }
        val unified = DelayProxy(cdn.port, CONNECT_MS)
        val backup = DelayProxy(cdn.port, CONNECT_MS)
        val urls = (0 until IMAGES).map { i -> val d = i % DOMAINS; "http://img$d.test.example:${domainProxies[d].port}/p/$i.jpg" }
        val before = Figures("(a) before: ${DOMAINS} domains, LocalDNS")
        val after = Figures("(b) SDK: HTTPDNS, one unified host, failover")
        val merges = (0 until DOMAINS).joinToString(",") { d -> """{"host":"img$d.test.example:${domainProxies[d].port}","pathPrefix":"/img$d","rate":1}""" }
        val doc = TestKit.doc(1, listOf("cdn.test.example:${unified.port}", "cdn-b.test.example:${backup.port}"), merges = merges)
        try {
            repeat(PAGES) { page ->
                // Alternate the order so drift on the machine falls on both sides alike.
                val runs = listOf<() -> Unit>({
                    val client = OkHttpClient.Builder().dns(LocalDnsStandIn(page.toLong())).build()
                    loadPage(client, urls, before)
                    client.connectionPool.evictAll()
                    client.dispatcher.executorService.shutdown()
                }, {
                    HttpDns.builder().serviceUrls(listOf(service.url)).deviceId("bench-$page").defaultConfig(doc)
                        .allowPrivateAddresses(true).localDns(LocalDnsStandIn(page.toLong())).ipStackDetector { IpStack.IPV4 }
                        .refreshServiceIps(false).events(false).feedback(false).build().use { sdk ->
                            val client = sdk.install(OkHttpClient.Builder()).build()
                            loadPage(client, urls, after)
                            client.dispatcher.executorService.shutdown()
                        }
                })
                (if (page % 2 == 0) runs else runs.reversed()).forEach { it() }
            }
        } finally {
            (domainProxies + unified + backup).forEach { it.close() }
            cdn.close()
            service.close()
        }
        val dt = 100.0 * (after.mean() - before.mean()) / before.mean()
        println(
            "PAGE-LOAD ($PAGES pages x $IMAGES images, $DOMAINS domains, connect +${CONNECT_MS} ms, node 503 ${NODE_FAIL * 100}%, " +
                "LocalDNS 20-60 ms, slow ${SLOW * 100}% (800 ms), hijacked ${HIJACK * 100}%)\n" +
                "| run | requests | mean ms | p90 ms | failures |\n| --- | --- | --- | --- | --- |\n" +
                listOf(before, after).joinToString("\n") { "| ${it.name} | ${it.requests} | ${"%.0f".format(it.mean())} | ${it.p90()} | ${"%.2f".format(it.failRate())}% |" } +
                "\nmean request time ${"%+.0f".format(dt)}% (seed: -21%, 354 -> 277 ms); failures ${"%.2f".format(before.failRate())}% -> ${"%.2f".format(after.failRate())}% (seed: 3.42% -> 2.56%)"
        )
    }
}
