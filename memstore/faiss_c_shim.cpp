// faiss_c_shim.cpp — the subset of the FAISS C API (faiss/c_api/*.h, upstream names and signatures) that
// memstore calls, for systems whose FAISS has the C API headers but no libfaiss_c (Debian 12's libfaiss-dev).
// Built only when no libfaiss_c is found. Each function catches every C++ exception and turns it into the C
// API's error code, with the message kept for faiss_get_last_error(), as upstream's c_api/macros_impl.h does.
#include <faiss/AutoTune.h>
#include <faiss/Clustering.h>
#include <faiss/Index.h>
#include <faiss/impl/FaissException.h>
#include <faiss/index_factory.h>
#include <faiss/utils/distances.h>

#include <exception>
#include <string>
#include <vector>

extern "C" {
#include <faiss/c_api/AutoTune_c.h>
#include <faiss/c_api/Clustering_c.h>
#include <faiss/c_api/utils/distances_c.h>
#include <faiss/c_api/Index_c.h>
#include <faiss/c_api/error_c.h>
#include <faiss/c_api/index_factory_c.h>
}

namespace {
thread_local std::string last_error;

template <typename F> int guarded(F &&f) {
    try {
        f();
        return 0;
    } catch (const faiss::FaissException &e) {
        last_error = e.what();
        return -2; // FAISS_EXCEPT
    } catch (const std::exception &e) {
        last_error = e.what();
        return -4; // STD_EXCEPT
    } catch (...) {
        last_error = "unknown exception";
        return -1; // UNKNOWN_EXCEPT
    }
}

faiss::Index *idx(FaissIndex *p) { return reinterpret_cast<faiss::Index *>(p); }
const faiss::Index *idx(const FaissIndex *p) { return reinterpret_cast<const faiss::Index *>(p); }
} // namespace

extern "C" {

const char *faiss_get_last_error() { return last_error.c_str(); }

void faiss_set_distance_compute_blas_threshold(int value) { faiss::distance_compute_blas_threshold = value; }
int faiss_get_distance_compute_blas_threshold() { return faiss::distance_compute_blas_threshold; }

int faiss_index_factory(FaissIndex **p_index, int d, const char *description, FaissMetricType metric) {
    return guarded([&] {
        *p_index = reinterpret_cast<FaissIndex *>(
            faiss::index_factory(d, description, static_cast<faiss::MetricType>(metric)));
    });
}

void faiss_Index_free(FaissIndex *obj) { delete idx(obj); }
int faiss_Index_is_trained(const FaissIndex *index) { return idx(index)->is_trained; }
idx_t faiss_Index_ntotal(const FaissIndex *index) { return idx(index)->ntotal; }

int faiss_Index_train(FaissIndex *index, idx_t n, const float *x) {
    return guarded([&] { idx(index)->train(n, x); });
}

int faiss_Index_add(FaissIndex *index, idx_t n, const float *x) {
    return guarded([&] { idx(index)->add(n, x); });
}

int faiss_Index_search(const FaissIndex *index, idx_t n, const float *x, idx_t k, float *distances,
                       idx_t *labels) {
    return guarded([&] { idx(index)->search(n, x, k, distances, labels); });
}

int faiss_Index_reset(FaissIndex *index) {
    return guarded([&] { idx(index)->reset(); });
}

int faiss_ParameterSpace_new(FaissParameterSpace **space) {
    return guarded([&] { *space = reinterpret_cast<FaissParameterSpace *>(new faiss::ParameterSpace()); });
}

void faiss_ParameterSpace_free(FaissParameterSpace *obj) { delete reinterpret_cast<faiss::ParameterSpace *>(obj); }

int faiss_ParameterSpace_set_index_parameter(const FaissParameterSpace *space, FaissIndex *index, const char *name,
                                             double value) {
    return guarded([&] {
        reinterpret_cast<const faiss::ParameterSpace *>(space)->set_index_parameter(idx(index), name, value);
    });
}

void faiss_ClusteringParameters_init(FaissClusteringParameters *params) {
    faiss::ClusteringParameters d;
    params->niter = d.niter;
    params->nredo = d.nredo;
    params->verbose = d.verbose;
    params->spherical = d.spherical;
    params->int_centroids = d.int_centroids;
    params->update_index = d.update_index;
    params->frozen_centroids = d.frozen_centroids;
    params->min_points_per_centroid = d.min_points_per_centroid;
    params->max_points_per_centroid = d.max_points_per_centroid;
    params->seed = d.seed;
    params->decode_block_size = d.decode_block_size;
}

int faiss_Clustering_new_with_params(FaissClustering **p_clustering, int d, int k,
                                     const FaissClusteringParameters *cp) {
    return guarded([&] {
        faiss::ClusteringParameters p;
        p.niter = cp->niter;
        p.nredo = cp->nredo;
        p.verbose = cp->verbose != 0;
        p.spherical = cp->spherical != 0;
        p.int_centroids = cp->int_centroids != 0;
        p.update_index = cp->update_index != 0;
        p.frozen_centroids = cp->frozen_centroids != 0;
        p.min_points_per_centroid = cp->min_points_per_centroid;
        p.max_points_per_centroid = cp->max_points_per_centroid;
        p.seed = cp->seed;
        p.decode_block_size = cp->decode_block_size;
        *p_clustering = reinterpret_cast<FaissClustering *>(new faiss::Clustering(d, k, p));
    });
}

int faiss_Clustering_train(FaissClustering *clustering, idx_t n, const float *x, FaissIndex *index) {
    return guarded([&] { reinterpret_cast<faiss::Clustering *>(clustering)->train(n, x, *idx(index)); });
}

void faiss_Clustering_centroids(FaissClustering *clustering, float **centroids, size_t *size) {
    std::vector<float> &c = reinterpret_cast<faiss::Clustering *>(clustering)->centroids;
    if (centroids) *centroids = c.data();
    if (size) *size = c.size();
}

void faiss_Clustering_free(FaissClustering *clustering) { delete reinterpret_cast<faiss::Clustering *>(clustering); }

} // extern "C"
