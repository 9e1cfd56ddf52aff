"""All the outputs of one run, published together or not at all.

Every raster and every file vector output is written under a hidden
temporary name beside its target (``core.scratch.temporary_path``, which
records the owning process so a killed run's leftovers are swept by the
next run) and moved into place by :meth:`OutputSet.commit` only when every
output is complete; on any failure or cancel :meth:`OutputSet.rollback`
removes them and the old files stay as they were.

Vector sinks are checked on every write (``addFeatures`` returning False
is an error naming the output and QGIS's reason), and after closing (the
file must hold every feature written: a GeoPackage on a full disk can
fail only when its transaction is committed on close).
"""

import os
import re

from qgis.core import (QgsFeatureSink, QgsProcessing, QgsProcessingException,
                       QgsProcessingOutputLayerDefinition, QgsProperty)

from ..core import scratch

_PROVIDER_PREFIX = re.compile(r"^[A-Za-z_]{2,}:")


def file_target(value, context=None):
    """The file path a destination parameter's value names, or None for a
    non-file target (a memory layer, TEMPORARY_OUTPUT, a database URI)."""
    if isinstance(value, QgsProcessingOutputLayerDefinition):
        if value.sink.propertyType() != QgsProperty.StaticProperty:
            if context is None:
                return None
            value = value.sink.valueAsString(context.expressionContext())[0]
        else:
            value = value.sink.staticValue()
    if value is None:
        return None
    target = str(value).strip()
    if not target or target == QgsProcessing.TEMPORARY_OUTPUT or (
            not os.path.isabs(target) and _PROVIDER_PREFIX.match(target)):
        return None
    return target.split("|")[0]


class CheckedSink:
    """A feature sink whose every write is checked, and cancellable."""

    def __init__(self, sink, label, feedback, folder=None):
        self.sink = sink
        self.label = label
        self.feedback = feedback
        self.folder = folder
        self.count = 0

    def add(self, features):
        """Add ``features``; a refused write or a cancel raises."""
        if self.feedback is not None and self.feedback.isCanceled():
            raise QgsProcessingException(
                "cancelled by the user; no output was written")
        features = list(features)
        if not features:
            return
        if not self.sink.addFeatures(features, QgsFeatureSink.FastInsert):
            raise QgsProcessingException(self.failure(self.sink.lastError()))
        self.count += len(features)

    def failure(self, reason):
        reason = (reason or "").strip() or "the data provider refused them"
        if self.folder is not None and (
                scratch.is_disk_full(RuntimeError(reason))
                or "full" in reason.lower() or (
                    (scratch.free_bytes(self.folder) or 1 << 30) < 1 << 20)):
            return str(scratch.disk_full_error(self.folder, 0, self.label))
        return (f"cannot write the features of {self.label}: {reason}. "
                "Nothing was written; check the output's folder and format")

    def close(self):
        """Flush and close the sink (its file is complete afterwards)."""
        if self.sink is None:
            return
        flush = getattr(self.sink, "flushBuffer", None)
        if flush is not None and not flush():
            raise QgsProcessingException(self.failure(self.sink.lastError()))
        self.sink = None


class OutputSet:
    """The outputs of one run; a context manager that rolls back on error.

    ``algorithm`` gives the parameter labels and makes the sinks.
    """

    def __init__(self, algorithm, parameters, context, feedback):
        self.algorithm = algorithm
        self.parameters = parameters
        self.context = context
        self.feedback = feedback
        self._rasters = []   # (temporary, final)
        self._sinks = []     # (CheckedSink, temporary, final, dest ids)
        self.committed = False

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        if not self.committed:
            self.rollback()
        return False

    def label(self, name):
        return self.algorithm.parameterLabel(name)

    # ------------------------------------------------------------ rasters

    def rasterPath(self, final):  # noqa: N802
        """The temporary path a raster output ``final`` is written to."""
        temporary = scratch.temporary_path(final)
        self._rasters.append((temporary, final))
        return temporary

    # -------------------------------------------------------------- sinks

    def sink(self, name, fields, geometry_type, crs):
        """(CheckedSink, destination id) of the feature sink ``name``; a
        file target is created under a temporary name."""
        value = self.parameters.get(name)
        final = file_target(value, self.context)
        parameters = self.parameters
        temporary = None
        if final is not None:
            temporary = scratch.temporary_path(final)
            if isinstance(value, QgsProcessingOutputLayerDefinition):
                definition = QgsProcessingOutputLayerDefinition(value)
                definition.sink = QgsProperty.fromValue(
                    str(definition.sink.staticValue()).replace(
                        final, temporary, 1)
                    if definition.sink.propertyType()
                    == QgsProperty.StaticProperty else temporary)
            else:
                definition = str(value).replace(final, temporary, 1)
            parameters = dict(self.parameters)
            parameters[name] = definition
        sink, dest_id = self.algorithm.parameterAsSink(
            parameters, name, self.context, fields, geometry_type, crs)
        if sink is None:
            if temporary is not None:
                scratch.discard(temporary)
            raise QgsProcessingException(
                self.algorithm.invalidSinkError(self.parameters, name))
        final_id = dest_id
        if temporary is not None:
            final_id = dest_id.replace(temporary, final)
            # QGIS loads (and styles) the output under its final name
            self._renameLayerToLoad(dest_id, final_id)
        self.algorithm.setStyle(self.context, final_id,
                                self.algorithm.outputStyle(name))
        checked = CheckedSink(sink, self.label(name), self.feedback,
                              os.path.dirname(os.path.abspath(final))
                              if final else None)
        self._sinks.append((checked, temporary, final, dest_id, final_id))
        return checked, final_id

    # ------------------------------------------------------ commit / undo

    def commit(self):
        """Close every sink, check it, then move every output into place."""
        if self.feedback is not None and self.feedback.isCanceled():
            raise QgsProcessingException(
                "cancelled by the user; no output was written")
        for checked, temporary, final, dest_id, final_id in self._sinks:
            checked.close()
        if self._sinks:
            # the sinks' files are closed only when QGIS drops its writers
            # (a full collection: 0.07-0.1 s, so only when there are any)
            import gc
            gc.collect()
        for checked, temporary, final, dest_id, final_id in self._sinks:
            if temporary is not None:
                self._checkFeatureCount(checked, temporary)
        for temporary, final in self._rasters:
            if not os.path.exists(temporary):
                raise QgsProcessingException(
                    f"{final} was not written (internal error): nothing "
                    "was published")
        moves = [(temporary, final) for temporary, final in self._rasters]
        moves += [(temporary, final) for _, temporary, final, *_ in
                  self._sinks if temporary is not None]
        for temporary, final in moves:
            try:
                scratch.publish(temporary, final)
            except OSError as error:
                raise QgsProcessingException(
                    f"cannot move the finished output into place at {final}: "
                    f"{error.strerror or error}; check that it is not a "
                    "folder or a file open elsewhere, and run again") from None
        self.committed = True

    def _checkFeatureCount(self, checked, temporary):  # noqa: N802
        from osgeo import ogr
        try:
            dataset = ogr.Open(temporary)
            layer = dataset.GetLayer(0) if dataset is not None else None
            count = layer.GetFeatureCount() if layer is not None else -1
            dataset = layer = None
        except RuntimeError as error:
            raise QgsProcessingException(checked.failure(str(error))) from None
        if count != checked.count:
            raise QgsProcessingException(checked.failure(
                f"only {max(count, 0)} of {checked.count} features reached "
                "the file"))

    def _renameLayerToLoad(self, dest_id, final_id):  # noqa: N802
        layers = self.context.layersToLoadOnCompletion()
        if dest_id not in layers or dest_id == final_id:
            return
        layers[final_id] = layers.pop(dest_id)
        self.context.setLayersToLoadOnCompletion(layers)

    def rollback(self):
        """Remove every temporary output (the targets stay untouched)."""
        for entry in self._sinks:
            entry[0].sink = None
        import gc
        gc.collect()
        for temporary, _ in self._rasters:
            scratch.discard(temporary)
        for _, temporary, *_ in self._sinks:
            if temporary is not None:
                scratch.discard(temporary)
        self._rasters, self._sinks = [], []
