package io.httpdns.android

import io.httpdns.android.TestKit.Server
import io.httpdns.android.TestKit.json
import okhttp3.OkHttpClient
import okhttp3.Request
import okhttp3.mockwebserver.MockResponse
import org.junit.jupiter.api.Assertions.assertEquals
import org.junit.jupiter.api.Assertions.assertTrue
import org.junit.jupiter.api.Test
import org.junit.jupiter.api.Timeout

/** Runs after packaging, against the published jar (ProGuard-processed): the public path end to end. */
@Timeout(60)
class PublishedJarIT {
    @Test
    fun thePublishedJarResolvesConvergesAndFailsOver() {
        val location = HttpDns::class.java.protectionDomain.codeSource.location.path
        assertTrue(location.endsWith(".jar"), "testing the jar, not the classes directory: $location")
        Server { r -> json(TestKit.answer(r.requestUrl!!.queryParameter("host")!!, "127.0.0.1")) }.use { svc ->
            Server { MockResponse().setResponseCode(502) }.use { a ->
                Server { MockResponse().setBody("b") }.use { b ->
                    val doc = TestKit.doc(3, listOf("127.0.0.1:${a.port}", "127.0.0.1:${b.port}"),
                        merges = """{"host":"img.test.example","pathPrefix":"/image","rate":1}""")
                    HttpDns.builder().serviceUrls(listOf(svc.url)).deviceId("device-0001").defaultConfig(doc)
                        .allowPrivateAddresses(true).localDns(TestKit.FakeDns(emptyMap())).ipStackDetector { IpStack.IPV4 }
                        .refreshServiceIps(false).events(false).build().use { sdk ->
                            val client = sdk.install(OkHttpClient.Builder()).build()
                            client.newCall(Request.Builder().url("http://img.test.example/a.jpg").build()).execute().use {
                                assertEquals("b", it.body!!.string())
                            }
                            assertEquals("/image/a.jpg", b.requests.single().path)
                            assertEquals(ResolutionPath.HTTPDNS, sdk.lookup("x.test.example").path)
                        }
                }
            }
        }
        assertEquals(9171L, Buckets.bucket("image.xxx.com", "a1b2c3d4e5f6"))
    }
}
