package io.httpdns.android

import io.httpdns.android.TestKit.Server
import io.httpdns.android.TestKit.json
import okhttp3.OkHttpClient
import okhttp3.Request
import okhttp3.mockwebserver.MockResponse
import okhttp3.mockwebserver.MockWebServer
import okhttp3.tls.HandshakeCertificates
import okhttp3.tls.HeldCertificate
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.Timeout
import org.junit.jupiter.api.assertThrows
import java.net.InetAddress
import javax.net.ssl.SSLPeerUnverifiedException

@Timeout(60)
class TlsAndNetworkTest {
    private val ca = HeldCertificate.Builder().certificateAuthority(0).commonName("test CA").build()

    private fun https(name: String): MockWebServer {
        val cert = HeldCertificate.Builder().addSubjectAlternativeName(name).signedBy(ca).build()
        val certs = HandshakeCertificates.Builder().heldCertificate(cert).build()
        return MockWebServer().apply {
            useHttps(certs.sslSocketFactory(), false)
            dispatcher = object : okhttp3.mockwebserver.Dispatcher() {
                override fun dispatch(request: okhttp3.mockwebserver.RecordedRequest) = MockResponse().setBody("secure")
            }
            start(InetAddress.getByName("127.0.0.1"), 0)
        }
    }

    @Test
    fun httpsByIpKeepsTheHostNamesCertificateChecks() {
        val trust = HandshakeCertificates.Builder().addTrustedCertificate(ca.certificate).build()
        Server { r -> json(TestKit.answer(r.requestUrl!!.queryParameter("host")!!, "127.0.0.1")) }.use { svc ->
            TestKit.builder(svc.url).build().use { sdk ->
                val client = sdk.install(OkHttpClient.Builder())
                    .sslSocketFactory(trust.sslSocketFactory(), trust.trustManager).build()
                val good = https("secure.test.example")
                good.use {
                    client.newCall(Request.Builder().url("https://secure.test.example:${good.port}/x").build()).execute().use {
                        assertEquals("secure", it.body!!.string())
                    }
                }
                // HTTPDNS sends the name to an address whose certificate is for another name: refused.
                https("other.test.example").use { wrong ->
                    assertThrows<SSLPeerUnverifiedException> {
                        client.newCall(Request.Builder().url("https://secure.test.example:${wrong.port}/x").build()).execute().close()
                    }
                }
            }
        }
    }

    @Test
    fun aNetworkChangeEvictsPooledConnectionsAndReResolves() {
        Server { r -> json(TestKit.answer(r.requestUrl!!.queryParameter("host")!!.split(',')[0], "127.0.0.1")) }.use { svc ->
            Server { MockResponse().setBody("ok") }.use { site ->
                val net = NetworkMonitor.Fixed("wifi:a")
                TestKit.builder(svc.url).networkMonitor(net).build().use { sdk ->
                    val client = sdk.install(OkHttpClient.Builder()).build()
                    client.newCall(Request.Builder().url("http://site.test.example:${site.port}/").build()).execute().use { it.body!!.string() }
                    assertEquals(1, client.connectionPool.connectionCount())
                    net.change("cellular:46001")
                    assertEquals(0, client.connectionPool.connectionCount())
                    // The name is looked up again for the new network.
                    TestKit.eventually { svc.requests.size == 2 }
                    Thread.sleep(300) // the request is recorded before its answer is cached
                    assertEquals(ResolutionPath.CACHE, sdk.lookup("site.test.example").path)
                    assertEquals(2, svc.requests.size)
                }
            }
        }
    }

    @Test
    fun connectionsAreReportedToFeedback() {
        Server { r ->
            if (r.path!!.startsWith("/feedback")) json("""{"accepted":1,"ignored":0}""", 202)
            else json(TestKit.answer(r.requestUrl!!.queryParameter("host")!!, "127.0.0.1"))
        }.use { svc ->
            Server { MockResponse().setBody("ok") }.use { site ->
                TestKit.builder(svc.url).networkMonitor(NetworkMonitor.Fixed("wifi:home")).build().use { sdk ->
                    val client = sdk.install(OkHttpClient.Builder()).eventListenerFactory(sdk.eventListenerFactory()).build()
                    client.newCall(Request.Builder().url("http://site.test.example:${site.port}/").build()).execute().use { it.body!!.string() }
                    val dead = java.net.ServerSocket(0).use { it.localPort }
                    runCatching { client.newCall(Request.Builder().url("http://gone.test.example:$dead/").build()).execute().close() }
                    assertEquals(true, sdk.flushEvents())
                    val reports = svc.paths("/feedback").flatMap { Json.parseObject(it.body.readUtf8()).list("reports") }.map { Json.asObject(it)!! }
                    val ok = reports.single { it.str("domain") == "site.test.example" }
                    assertEquals(listOf("127.0.0.1", true, "wifi"), listOf(ok.str("ip"), ok.bool("ok"), ok.str("network")))
                    assertTrue(ok.long("connect_ms")!! in 0..5000)
                    val failed = reports.first { it.str("domain") == "gone.test.example" }
                    assertEquals(false, failed.bool("ok"))
                    assertEquals(null, failed["connect_ms"])
                    assertEquals(null, ok["timestamp"], "reports go as the server reads them")
                }
            }
        }
    }
}
